"""Preemption: the ``Preempt`` fault, the oracle's rule for it, and Lightning's known
SIGTERM issues reported apart (synthetic outcomes here; real 2-rank runs at the end)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import find, given

import chaoslight
from chaoslight import (
    Event,
    InvalidArgument,
    InvalidSchedule,
    Outcome,
    Preempt,
    Schedule,
    Verdict,
    judge,
)
from chaoslight._cli import _fuzz as fuzz_cli
from chaoslight._cli import main
from chaoslight._report._outcome import overall, settle
from chaoslight._report._records import ExceptionInfo, RankResult
from chaoslight._runtime import FIRED, NOTE
from chaoslight._runtime._preempt import handler_owner
from chaoslight._search._campaign import CLEAN, FOUND, Campaign
from chaoslight._search._strategies import preemptions
from chaoslight._verdict._known import KNOWN_ISSUES, match_known, parse_version
from chaoslight._verdict._oracle import FAILED_CLEANLY, NO_FAULT, PREEMPT_RULE, By
from chaoslight.strategies import schedules

SITE = "lightning.training_step"
PREEMPT = f"preempt@{SITE} rank=1 step=4"
LIGHTNING_266 = "lightning (pytorch-lightning 2.6.6)"
LIGHTNING_251 = "lightning (pytorch-lightning 2.5.1)"


def delivered(rank: int, handler: str, fault: str = PREEMPT, step: int = 4) -> list[Event]:
    detail = f"SIGTERM delivered to rank {rank} at step {step}; handled by {handler}"
    return [
        Event(FIRED, SITE, rank, step, 1.0, 1.0, fault, 1),
        Event(NOTE, SITE, rank, step, 1.1, 1.1, fault, 0, detail),
    ]


def stopped(rank: int, step: int) -> Event:
    return Event(NOTE, SITE, rank, step, 2.0, 2.0, "", 0, f"last training step {step}")


LOOPS = "/site/pytorch_lightning/loops"


def sigterm(rank: int) -> RankResult:
    """Lightning's loop raised SIGTERMException on this rank."""
    frame = f'  File "{LOOPS}/training_epoch_loop.py", line 422, in on_advance_end\n'
    tb = f"Traceback (most recent call last):\n{frame}SIGTERMException"
    return RankResult(rank, "failed", ExceptionInfo("SIGTERMException", "", tb), ended_s=1.5)


def waiting_in(rank: int, *frames: tuple[str, str]) -> RankResult:
    """A hung rank whose main thread's stack is ``frames``, innermost first."""
    lines = "".join(f'  File "{path}", line 1 in {function}\n' for path, function in frames)
    return replace(hung(rank), stacks=f"Thread 0x1 (most recent call first):\n{lines}")


HANDLER = ("/site/pytorch_lightning/trainer/connectors/signal_connector.py", "_sigterm_notifier_fn")
BACKWARD = ("/site/torch/autograd/graph.py", "_engine_run_backward")


def in_handler_broadcast(rank: int) -> RankResult:
    """Blocked in the broadcast Lightning 2.5.2-2.6's SIGTERM handler issues."""
    return waiting_in(rank, ("/site/torch/distributed/distributed_c10d.py", "broadcast"), HANDLER)


def gloo_error(rank: int) -> RankResult:
    info = ExceptionInfo("RuntimeError", "Connection closed by peer", "tb", True)
    return RankResult(rank, "failed", info, ended_s=1.6)


def hung(rank: int) -> RankResult:
    return RankResult(rank, "hung", evidence=f"rank {rank} waits in dist.broadcast #8")


def run(ranks: list[RankResult], events: list[Event], fault: str = PREEMPT) -> Outcome:
    settled = settle(ranks)
    return Outcome(overall(settled), settled, events, 1.0, Schedule.parse(fault), "t.py:f", 5.0)


def test_preempt_has_a_one_line_text_form_that_round_trips() -> None:
    """A Preempt prints as preempt@SITE with its trigger and after=, and parses back."""
    fault = Preempt(site=SITE, rank=1, step=3, after=0.3)
    assert str(fault) == f"preempt@{SITE} rank=1 step=3 after=0.3"
    assert Schedule.parse(str(fault)).faults == (fault,)


@pytest.mark.parametrize("after", [-1, 61, float("nan"), "soon", True])
def test_preempt_refuses_an_after_that_is_not_a_short_delay(after: Any) -> None:
    """after= must be a finite number of seconds within a minute, named in the error."""
    with pytest.raises(InvalidArgument, match="after="):
        Preempt(site=SITE, after=after)


def test_inject_refuses_a_preemption_in_process() -> None:
    """In-process a SIGTERM the program does not handle would end the pytest session."""
    with pytest.raises(InvalidSchedule, match="would kill this process"):
        chaoslight.inject(Preempt(site=SITE)).__enter__()


def test_in_process_search_refuses_preempt_faults() -> None:
    """An in-process strategy never draws a preemption, and asking for one says why."""
    with pytest.raises(InvalidArgument, match="'preempt' would kill this process"):
        schedules(faults=["preempt"], in_process=True)


@given(fault=preemptions(world_size=2, sites=[SITE]))
def test_preemptions_are_sigterm_to_every_rank_or_one(fault: Preempt) -> None:
    """The strategy draws Preempt faults, to every rank (rank=None) or to one rank."""
    assert isinstance(fault, Preempt) and fault.rank in (None, 0, 1)


def test_preemptions_shrink_to_every_rank_at_the_trigger() -> None:
    """The minimal preemption is SIGTERM to every rank at once, at step 0, no delay."""
    assert find(preemptions(world_size=2, sites=[SITE]), lambda f: True) == Preempt(
        site=SITE, step=0
    )


def test_handler_owner_tells_lightning_from_the_program_and_the_default() -> None:
    """Lightning's handler is named with its package and version; others by who owns them."""
    from pytorch_lightning.trainer.connectors.signal_connector import _HandlersCompose

    assert handler_owner(_HandlersCompose([])).startswith("lightning (pytorch-lightning ")
    assert handler_owner(signal.SIG_DFL) == "the default action"
    assert handler_owner(lambda *a: None) == "the program"


def test_every_rank_stopping_at_the_same_step_passes() -> None:
    """Both ranks raise SIGTERMException after the same step: the job stopped together."""
    events = [*delivered(1, "the program"), stopped(0, 4), stopped(1, 4)]
    verdict = judge(run([sigterm(0), sigterm(1)], events))
    assert not verdict.failed and verdict.rule == PREEMPT_RULE


def test_ranks_stopping_at_different_steps_is_a_finding() -> None:
    """Ranks that stop at different steps did not agree: named with each rank's step."""
    events = [*delivered(1, "the program"), stopped(0, 5), stopped(1, 4)]
    verdict = judge(run([chaoslight_passed(0), chaoslight_passed(1)], events))
    assert verdict.failed and "rank 0 after step 5, rank 1 after step 4" in verdict.reason


def chaoslight_passed(rank: int) -> RankResult:
    return RankResult(rank, "passed", ended_s=2.0)


def test_a_peer_left_in_a_collective_is_a_finding_that_mentions_nccl() -> None:
    """On gloo the peer of a rank that stopped alone gets a transport error; NCCL hangs."""
    events = [*delivered(1, "the program"), stopped(0, 4), stopped(1, 4)]
    verdict = judge(run([gloo_error(0), sigterm(1)], events))
    assert verdict.failed and "transport error" in verdict.reason and "NCCL" in verdict.reason
    assert verdict.known is None  # the program's own handler ran: the program's bug


def test_a_hang_after_lightnings_handler_is_lightnings_known_issue() -> None:
    """On 2.6.6 a hang after Lightning's handler took the SIGTERM matches the broadcast issue."""
    events = delivered(1, LIGHTNING_266)
    verdict = judge(run([waiting_in(0, BACKWARD), in_handler_broadcast(1)], events))
    assert verdict.failed and verdict.known is not None
    issue, package, version = verdict.known.issue, verdict.known.package, verdict.known.version
    assert (issue.key, package, version) == (
        "lightning-sigterm-broadcast",
        "pytorch-lightning",
        "2.6.6",
    )


def test_a_rank_stopping_alone_on_251_is_the_older_known_issue() -> None:
    """On 2.5.1 one rank raising SIGTERMException while its peer errors is issue #20806."""
    events = [*delivered(1, LIGHTNING_251), stopped(0, 4), stopped(1, 4)]
    verdict = judge(run([gloo_error(0), sigterm(1)], events))
    assert verdict.known is not None
    issue, version = verdict.known.issue, verdict.known.version
    assert issue.key == "lightning-sigterm-alone" and version == "2.5.1"
    assert "20806" in issue.reference


def test_on_251_a_signalled_peer_left_in_a_collective_at_the_same_step_is_the_issue() -> None:
    """Both ranks signalled by a group SIGTERM; the signal landed after rank 0's check of
    its batch's end and before rank 1's: rank 1 raised SIGTERMException, rank 0 went on into
    the next batch and was released by gloo, both last seen at the same training step
    (found by the budget campaign on 2.5.1's upstream bug_report_model). Up to 2.5.1 nothing
    makes the ranks agree on a stop: Lightning's issue #20806, not the program's."""
    events = [*delivered(0, LIGHTNING_251), *delivered(1, LIGHTNING_251)]
    events += [stopped(0, 6), stopped(1, 6)]
    verdict = judge(run([gloo_error(0), sigterm(1)], events))
    assert verdict.known is not None and verdict.known.issue.key == "lightning-sigterm-alone"
    assert not verdict.findings, verdict.accounts


def test_a_rank_stopping_alone_on_266_is_the_broadcast_issue() -> None:
    """On 2.6.6 a SIGTERM to rank 1 alone is missed by the per-batch broadcast (rank 0's flag
    only): rank 1 raises SIGTERMException at its batch's end, rank 0 is released later by
    gloo in another collective. That is Lightning's issue, as seen on correct programs."""
    events = [*delivered(1, LIGHTNING_266), stopped(0, 5), stopped(1, 4)]
    verdict = judge(run([gloo_error(0), sigterm(1)], events))
    assert verdict.failed and verdict.known is not None
    assert verdict.known.issue.key == "lightning-sigterm-broadcast"


def test_a_rank_gloo_aborted_in_lightnings_handler_broadcast_is_the_broadcast_issue() -> None:
    """On 2.6.6 the handler's broadcast on rank 1 meets DDP's buffer broadcast on rank 0:
    gloo aborts rank 1 (sizes differ), and its faulthandler dump shows the handler's frame.
    The same abort with the program's own frame there is the program's finding."""
    for caller, known in ((HANDLER, True), (("/home/me/train.py", "on_train_batch_end"), False)):
        frames = [("/site/torch/distributed/distributed_c10d.py", "broadcast"), caller]
        lines = "".join(f'  File "{path}", line 1 in {function}\n' for path, function in frames)
        dump = f"Thread 0x1 (most recent call first):\n{lines}"
        output = f"what(): size mismatch\nFatal Python error: Aborted\n\n{dump}"
        aborted = RankResult(1, "crashed", signal=6, output=output, ended_s=1.5)
        verdict = judge(run([gloo_error(0), aborted], delivered(1, LIGHTNING_266)))
        assert verdict.failed and (verdict.known is not None) is known, caller


def test_a_hang_after_lightnings_handler_is_known_whatever_else_fired() -> None:
    """A preemption and another fault fired: a hard allocation (1 GiB with no budget: a
    real device may run out), a delay, an allocation that cannot fail, a flipped sign bit
    of optimizer state. The ranks' ends show Lightning's handler broadcast paired with a
    peer's backward: its claim does not depend on what else fired, and nothing is left
    for the program (the allocation raised nothing)."""
    ranks = [waiting_in(0, BACKWARD), in_handler_broadcast(1)]
    for other in (
        "allocate@lightning.training_step rank=0 step=4 nbytes=1073741824",
        "allocate@lightning.training_step rank=0 step=4 nbytes=1024",
        "delay@lightning.training_step rank=0 step=4 seconds=0.1",
        "flip@lightning.training_step rank=0 step=4 target=optimizer_state bit=sign",
    ):
        events = [*delivered(1, LIGHTNING_266), Event(FIRED, SITE, 0, 4, 1.0, 1.0, other, 1)]
        verdict = judge(run(ranks, events, fault=f"{PREEMPT}\n{other}"))
        assert verdict.failed and verdict.known is not None, other
        assert verdict.known.issue.key == "lightning-sigterm-broadcast", other
        assert {a.by for a in verdict.accounts} == {By.KNOWN}, verdict.accounts


def test_a_known_issue_beside_the_programs_own_error_leaves_the_error_the_programs() -> None:
    """Lightning's handler broadcast strands rank 1, and rank 0 fails with an error of its
    own: the stranded rank is Lightning's (claimed, reported apart), the error the
    program's finding, named by its own evidence."""
    tb = 'Traceback (most recent call last):\n  File "/home/me/train.py", line 9, in x\n'
    info = ExceptionInfo("ValueError", "loss went missing", tb + "ValueError: loss went missing")
    own = RankResult(0, "failed", info, ended_s=1.0)
    verdict = judge(run([own, in_handler_broadcast(1)], delivered(1, LIGHTNING_266)))
    assert verdict.failed and verdict.known is None
    assert "ValueError: loss went missing" in verdict.reason
    assert [c.issue.key for c in verdict.claims] == ["lightning-sigterm-broadcast"]
    by_rank = {a.symptom.rank: a.by for a in verdict.accounts if a.symptom.violation is None}
    assert by_rank[1] == By.KNOWN and By.PROGRAM in {a.by for a in verdict.accounts}


def test_a_size_mismatch_abort_after_lightnings_handler_is_its_broadcast() -> None:
    """Lightning's handler broadcast paired with DDP's buffer broadcast on the peer, which
    gloo aborted for the size mismatch (no stack shows the handler): Lightning's issue;
    the same abort after the program's own handler, or beside a hard fault, is not."""
    abort = "what(): [enforce fail at pair.cc:456] op.preamble.length <= op.nbytes. 12 vs 4"
    aborted = RankResult(1, "crashed", signal=6, output=abort, ended_s=1.2)
    ranks = [gloo_error(0), aborted]
    verdict = judge(run(ranks, delivered(0, LIGHTNING_266)))
    assert verdict.failed and verdict.known is not None
    assert verdict.known.issue.key == "lightning-sigterm-broadcast"
    assert judge(run(ranks, delivered(0, "the program"))).known is None
    oom = "oom@lightning.training_step rank=1 step=4"
    events = [*delivered(0, LIGHTNING_266), Event(FIRED, SITE, 1, 4, 1.0, 1.0, oom, 1)]
    assert judge(run(ranks, events, fault=f"{PREEMPT}\n{oom}")).known is None


def test_a_known_issue_needs_lightnings_handler_to_have_run() -> None:
    """The same hang after the program's own handler is the program's finding."""
    verdict = judge(run([hung(0), hung(1)], delivered(1, "the program")))
    assert verdict.failed and verdict.known is None


def test_a_sigterm_with_no_handler_is_judged_as_a_crash() -> None:
    """SIGTERM before fit installs a handler ends the rank: every rank ending is clean."""
    crashed = RankResult(1, "crashed", signal=15, ended_s=1.0)
    verdict = judge(run([gloo_error(0), crashed], delivered(1, "the default action")))
    assert not verdict.failed and verdict.rule == FAILED_CLEANLY


def test_a_notice_the_run_ended_before_counts_as_never_fired() -> None:
    """A Preempt whose delayed SIGTERM was cancelled by the end of the run fired nothing."""
    events = [Event(FIRED, SITE, 1, 4, 1.0, 1.0, PREEMPT, 1)]
    verdict = judge(run([chaoslight_passed(0), chaoslight_passed(1)], events))
    assert not verdict.failed and verdict.rule == NO_FAULT


def issue(key: str) -> Any:
    return next(known for known in KNOWN_ISSUES if known.key == key)


def test_known_issue_versions_are_inclusive_and_ignore_suffixes() -> None:
    """2.5.2..2.6.x is the broadcast issue, up to 2.5.1 the older one; 'rc' suffixes ignored."""
    broadcast, alone = (
        issue(key) for key in ("lightning-sigterm-broadcast", "lightning-sigterm-alone")
    )
    assert parse_version("2.6.0rc1") == (2, 6, 0)
    assert broadcast.covers("lightning", "2.6.6") and broadcast.covers("pytorch-lightning", "2.5.2")
    assert not broadcast.covers("pytorch-lightning", "2.5.1")
    assert alone.covers("pytorch-lightning", "2.5.1") and not alone.covers("lightning", "2.5.2")
    assert match_known(run([hung(0), hung(1)], delivered(1, "the program"))) is None


def _campaign(verdicts: list[Verdict], strict: bool) -> Campaign:
    """A campaign whose runs are scripted: the baseline passes, then the verdicts given."""
    script = iter([Verdict(False, "", "passed")] * 2 + verdicts)

    def run_(schedule: Schedule, fresh: bool) -> tuple[Verdict, Any]:
        return next(script, Verdict(False, "", "passed")), None

    probe = Schedule.parse(PREEMPT)
    return Campaign(
        run_,
        schedules(faults=["delay"]),
        max_examples=1,
        replays=0,
        probes=lambda: [probe],
        strict=strict,
    )


def known_verdict() -> Verdict:
    outcome = run([waiting_in(0, BACKWARD), in_handler_broadcast(1)], delivered(1, LIGHTNING_266))
    return judge(outcome)


def test_a_known_issue_is_reported_apart_and_the_search_goes_on() -> None:
    """Not strict: the campaign ends clean, with the issue listed once under result.known."""
    result = _campaign([known_verdict()], strict=False).execute()
    assert result.status == CLEAN
    assert [k.issue.key for k in result.known] == ["lightning-sigterm-broadcast"]
    report = "\n".join(result.known[0].report())
    assert "known issue in pytorch-lightning 2.6.6" in report and "workaround:" in report


def test_strict_makes_a_known_issue_a_failure() -> None:
    """strict=True: the known issue is the campaign's failure."""
    result = _campaign([known_verdict()], strict=True).execute()
    assert result.status == FOUND and result.verdict.known is not None


# -- real 2-rank runs ------------------------------------------------------------------
TARGET = "examples/catalogue/preemption.py:"
PATTERNS = {
    "every rank": [Preempt(site=SITE, step=3)],
    "one rank": [Preempt(site=SITE, rank=1, step=3)],
    "skewed": [Preempt(site=SITE, rank=1, step=3), Preempt(site=SITE, rank=0, step=4)],
    "late notice": [Preempt(site=SITE, rank=0, step=3, after=0.05)],
}


@pytest.mark.slow
@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_the_agreement_stops_every_rank_together(world2: Any, pattern: str) -> None:
    """The flag + MAX-reduce agreement stops both ranks at the same step in every pattern."""
    outcome = world2.run(TARGET + "train_fixed", Schedule(PATTERNS[pattern]), timeout=10)
    verdict = judge(outcome)
    assert not verdict.failed, verdict.reason
    if pattern != "late notice":  # a late notice may find the fit already over: never sent
        assert any(e.detail.startswith("SIGTERM delivered") for e in outcome.events)


@pytest.mark.slow
def test_lightnings_own_handling_is_reported_as_its_known_issue(world2: Any) -> None:
    """SIGTERM to one rank of a plain Lightning job: the oracle names Lightning's issue."""
    outcome = world2.run(TARGET + "train_buggy", Schedule(PATTERNS["one rank"]), timeout=4)
    verdict = judge(outcome)
    assert verdict.failed and verdict.known is not None, verdict.reason
    assert "handled by lightning" in verdict.reason


@pytest.mark.slow
def test_fuzz_reports_lightnings_issue_apart_and_exits_0(
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    lend_world2: Callable[[Any], None],
) -> None:
    """`chaoslight fuzz` on a plain Lightning job prints the known issue with its workaround
    and exits 0 (the program's own search found nothing). The CLI's main, on the session's
    World."""
    lend_world2(fuzz_cli)
    monkeypatch.chdir(tmp_path)
    target = Path(__file__).resolve().parent.parent / "examples/catalogue/preemption.py"
    options = ["--faults", "preempt", "--max-examples", "3", "--timeout", "4", "--seed", "0"]
    capsys.readouterr()
    code = main(["fuzz", f"{target}:train_buggy", *options, "--replays", "1"])
    out, err = capsys.readouterr()
    assert code == 0, out[-3000:] + err[-3000:]
    assert "known issue in " in out and "workaround:" in out, out
