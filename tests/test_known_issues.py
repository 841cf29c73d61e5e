"""Known framework issues, matched by their signature and nothing wider: the ones that need
no signal are recognised from the hung ranks' stacks, with the version of the Lightning
those stacks run; the SIGTERM ones only when a rank waits in Lightning's own SIGTERM
broadcast and nothing but preemptions fired (``chaoslight/_verdict/_known.py``). A program's
own preemption bug on a Lightning with a SIGTERM issue stays the program's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import lightning
import pytest

import chaoslight
from chaoslight import Event, Outcome, Preempt, Schedule, World, fuzz, judge
from chaoslight._report._outcome import overall, settle
from chaoslight._report._records import ExceptionInfo, RankResult
from chaoslight._runtime import FIRED, NOTE
from chaoslight._search._campaign import FOUND
from chaoslight._verdict._known import match_known
from chaoslight._verdict._oracle import FAILED_CLEANLY

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "examples" / "known_issues" / "on_exception_checkpoint.py"
OWN_BUG = ROOT / "examples" / "known_issues" / "preemption_own_bug.py"
RAISE = "raise@lightning.training_step rank=1 step=2"


def lightning_site() -> tuple[str, str]:
    """The folder the installed Lightning lives in, and its version."""
    return str(Path(lightning.__file__).parent.parent), lightning.__version__


def stack(path: str) -> str:
    """A faulthandler dump of a rank waiting in save_checkpoint's barrier under ``path``."""
    return (
        "Thread 0x1 (most recent call first):\n"
        '  File "/x/torch/distributed/distributed_c10d.py", line 5356 in barrier\n'
        f'  File "{path}/trainer/trainer.py", line 1465 in save_checkpoint\n'
        f'  File "{path}/callbacks/on_exception_checkpoint.py", line 67 in on_exception\n'
    )


def hang(stacks: str) -> Outcome:
    ranks = settle([RankResult(0, "hung"), RankResult(1, "hung", stacks=stacks)])
    return Outcome(overall(ranks), ranks, [], 1.0, Schedule.parse(RAISE), "t.py:f", 5.0)


def test_a_hang_in_on_exception_checkpoint_is_lightnings_known_issue() -> None:
    """A rank hung in OnExceptionCheckpoint.on_exception matches #20187, with the package
    and version read from the installation the stack runs."""
    site, version = lightning_site()
    found = match_known(hang(stack(f"{site}/lightning/pytorch")))
    assert found is not None
    issue, package, seen = found.issue, found.package, found.version
    assert (issue.key, package, seen) == ("lightning-on-exception-checkpoint", "lightning", version)
    assert "20187" in issue.reference and "torch.save" in issue.workaround


def test_the_same_frames_in_the_users_own_files_are_the_users() -> None:
    """A callback of the program's own named like Lightning's is not Lightning's issue."""
    assert match_known(hang(stack("/home/me/project/mycallbacks"))) is None
    assert match_known(hang("")) is None


@pytest.fixture
def world(world2: World) -> World:
    """The session's 2-rank World."""
    return world2


@pytest.mark.slow
def test_an_error_on_one_rank_under_on_exception_checkpoint_is_reported_as_known(
    world: World,
) -> None:
    """Under DDP, Lightning's OnExceptionCheckpoint hangs the job when one rank raises: the
    verdict fails and names the known issue; the workaround's twin fails cleanly."""
    checks = [chaoslight.checks.check_by_name("no-hang")]
    outcome = world.run(f"{PROGRAM}:train", RAISE, timeout=10, checks=checks)
    verdict = judge(outcome)
    assert verdict.failed and verdict.known is not None, outcome.report()
    assert verdict.known.issue.key == "lightning-on-exception-checkpoint"
    # The twin ends by itself; under load it may take longer than the hang needs to show.
    fixed = world.run(f"{PROGRAM}:train_fixed", RAISE, timeout=30, checks=checks)
    assert judge(fixed).rule == FAILED_CLEANLY, fixed.report()


# -- the SIGTERM issues of Lightning 2.5.2-2.6.x: the signature, nothing wider -------------
SITE = "lightning.training_step"
PREEMPT_BOTH = f"preempt@{SITE} step=3"


def preempted(rank: int, step: int = 3, fault: str = PREEMPT_BOTH) -> list[Event]:
    """Lightning's handler took a SIGTERM on ``rank`` at ``step``, which it then ended at."""
    handler = f"lightning (lightning {lightning.__version__})"
    detail = f"SIGTERM delivered to rank {rank} at step {step}; handled by {handler}"
    return [
        Event(FIRED, SITE, rank, step, 1.0, 1.0, fault, 1),
        Event(NOTE, SITE, rank, step, 1.1, 1.1, fault, 0, detail),
        Event(NOTE, SITE, rank, step, 2.0, 2.0, "", 0, f"last training step {step}"),
    ]


def blocked(rank: int, *frames: tuple[str, str]) -> RankResult:
    """A hung rank whose main thread waits in a collective called from ``frames``."""
    site, _ = lightning_site()
    wait = [(f"{site}/torch/distributed/distributed_c10d.py", "barrier")]
    lines = "".join(f'  File "{p}", line 1 in {f}\n' for p, f in [*wait, *frames])
    return RankResult(rank, "hung", stacks=f"Thread 0x1 (most recent call first):\n{lines}")


def stopped_by_lightning(rank: int) -> RankResult:
    site, _ = lightning_site()
    frame = f'  File "{site}/lightning/pytorch/loops/fit_loop.py", line 503, in on_advance_start\n'
    tb = f"Traceback (most recent call last):\n{frame}SIGTERMException"
    return RankResult(rank, "failed", ExceptionInfo("SIGTERMException", "", tb), ended_s=1.0)


def judged(ranks: list[RankResult], events: list[Event]) -> object:
    settled = settle(ranks)
    schedule = Schedule.parse(PREEMPT_BOTH)
    return judge(Outcome(overall(settled), settled, events, 1.0, schedule, "t.py:f", 5.0))


def test_a_programs_own_barrier_after_lightnings_handler_is_the_programs() -> None:
    """Lightning's handler took the SIGTERM on both ranks and both stopped at step 3; rank 0
    then waits in a barrier its own on_exception called: a failure, not a known issue."""
    site, _ = lightning_site()
    own = [
        (f"{site}/lightning/pytorch/strategies/ddp.py", "barrier"),
        (f"{site}/lightning/pytorch/trainer/trainer.py", "save_checkpoint"),
        ("/home/me/project/callbacks.py", "on_exception"),
    ]
    verdict = judged([blocked(0, *own), stopped_by_lightning(1)], preempted(0) + preempted(1))
    assert verdict.failed and verdict.known is None, verdict.reason  # type: ignore[attr-defined]


def test_a_rank_in_lightnings_sigterm_broadcast_against_another_collective_is_known() -> None:
    """A rank waits in the per-batch SIGTERM broadcast (or the handler's) while its peer
    waits in another collective: Lightning's issue, whichever broadcast it is."""
    site, _ = lightning_site()
    loop = f"{site}/lightning/pytorch/loops/training_epoch_loop.py"
    handler = f"{site}/lightning/pytorch/trainer/connectors/signal_connector.py"
    elsewhere = blocked(0, (f"{site}/lightning/pytorch/strategies/ddp.py", "barrier"))
    for frame in ((loop, "_broadcast_sigterm_tensor"), (handler, "_sigterm_notifier_fn")):
        verdict = judged([elsewhere, blocked(1, frame)], preempted(1))
        assert (
            verdict.known is not None and verdict.known.issue.key == "lightning-sigterm-broadcast"
        )  # type: ignore[attr-defined]


def released_from_handler(rank: int) -> RankResult:
    """A rank whose stacks, taken while it waited in native code (a backward whose DDP
    all-reduce never completed), show no collective, and which a gloo timeout then
    released from the broadcast Lightning's SIGTERM handler issued inside that backward."""
    site, _ = lightning_site()
    handler = f"{site}/lightning/pytorch/trainer/connectors/signal_connector.py"
    backward = f"{site}/torch/autograd/graph.py"
    frame = f'  File "{backward}", line 979 in _engine_run_backward\n'
    stacks = f"Thread 0x1 (most recent call first):\n{frame}"
    tb = (
        "Traceback (most recent call last):\n"
        f'  File "{backward}", line 989, in _engine_run_backward\n'
        f'  File "{handler}", line 118, in _sigterm_notifier_fn\n'
        f'  File "{site}/torch/distributed/distributed_c10d.py", line 3151, in broadcast\n'
        "RuntimeError: Connection closed by peer\n"
    )
    info = ExceptionInfo("RuntimeError", "Connection closed by peer", tb, True)
    return RankResult(rank, "hung", info, stacks=stacks)


def test_every_rank_stuck_in_its_own_handlers_broadcast_is_known() -> None:
    """A whole-job SIGTERM whose handler ran at a different point on each rank (rank 0
    before a forward, rank 1 inside a backward): each handler's broadcast paired with the
    other rank's DDP collective and both ranks ended in Lightning's handler broadcast, one
    seen in its stacks, one only in the error that released it. Lightning's issue (the
    soak's FLAKY finding on examples/corpus/resume_last.py:train)."""
    site, _ = lightning_site()
    handler = (
        f"{site}/lightning/pytorch/trainer/connectors/signal_connector.py",
        "_sigterm_notifier_fn",
    )
    both = preempted(0, step=1) + preempted(1, step=1)
    verdict = judged([blocked(0, handler), released_from_handler(1)], both)
    assert verdict.failed and verdict.known is not None, verdict.reason  # type: ignore[attr-defined]
    assert verdict.known.issue.key == "lightning-sigterm-broadcast"  # type: ignore[attr-defined]
    alone = judged([RankResult(0, "hung"), released_from_handler(1)], both)
    assert alone.known is not None and alone.known.issue.key == "lightning-sigterm-broadcast"  # type: ignore[attr-defined]


def test_a_rank_in_the_handlers_broadcast_is_known_beside_a_hard_fault_but_not_without_it() -> None:
    """The same stuck broadcast is Lightning's when a crash fired too (its claim reads the
    ranks' ends, whatever else fired: the crashed rank never crashed, it was released from
    the handler's broadcast), and not when no SIGTERM reached Lightning's handler."""
    crash = "crash@lightning.training_step rank=1 step=1"
    crashed = [Event(FIRED, SITE, 1, 1, 1.0, 1.0, crash, 1)]
    events = preempted(0, step=1) + preempted(1, step=1)
    ranks = [RankResult(0, "hung"), released_from_handler(1)]
    beside = judged(ranks, events + crashed)
    assert beside.known is not None, beside.reason  # type: ignore[attr-defined]
    by_program = [
        replace(
            e,
            detail=e.detail.replace(
                f"lightning (lightning {lightning.__version__})", "the program"
            ),
        )
        for e in events
    ]
    assert judged(ranks, by_program).known is None  # type: ignore[attr-defined]


@pytest.mark.slow
def test_a_programs_own_preemption_bug_on_lightning_26_fails_the_search(world: World) -> None:
    """SIGTERM to every rank of a job whose on_exception saves from rank 0 only: the run is
    the program's failure, and fuzz --faults preempt ends FAILED (exit 1), not clean; its
    fixed twin stops cleanly under the same notice."""
    schedule = Schedule([Preempt(site=SITE, step=0)])
    outcome = world.run(f"{OWN_BUG}:train_buggy", schedule, timeout=4)
    verdict = judge(outcome)
    assert verdict.failed and verdict.known is None, outcome.report()
    fixed = world.run(f"{OWN_BUG}:train_fixed", schedule, timeout=4)
    assert not judge(fixed).failed, fixed.report()
    result, failure = fuzz(
        f"{OWN_BUG}:train_buggy",
        faults=["preempt"],
        max_examples=3,
        timeout=4,
        seed=0,
        replays=0,
        world=world,
    )
    assert result.status == FOUND and failure is not None and result.verdict is not None
    assert result.verdict.known is None, result.verdict.reason


# -- Lightning#19916: a job stopped by SIGTERM exits 0 (2.0.0-2.6.x) ------------------------
def exits_zero_violation() -> object:
    """The exit-status check's finding on a preempted job that exited 0 at step 4 of 12."""
    from chaoslight.checks import Violation

    message = (
        "reports success (every rank exited 0) after a preemption (SIGTERM to rank 0 at step "
        "3), but stopped at step 4 of 12: a scheduler would not requeue it"
    )
    return Violation("exit-status", message, rank=0, step=4, any_end=True)


def ended(
    rank: int, kind: str = "SIGTERMException", code: int = 0, loops: bool = True
) -> RankResult:
    """A rank that ended by ``kind`` (exit status ``code``), raised in Lightning's loops or
    in the program's own file."""
    site, _ = lightning_site()
    where = f"{site}/lightning/pytorch/loops/training_epoch_loop.py" if loops else "/app/train.py"
    tb = f'Traceback (most recent call last):\n  File "{where}", line 422, in run\n{kind}'
    info = ExceptionInfo(kind, "", tb, exit_status=code)
    return RankResult(rank, "failed", info, ended_s=1.0)


def stopped_job(ranks: list[RankResult], violations: tuple[object, ...] | None = None) -> Outcome:
    settled = settle(ranks)
    found = (exits_zero_violation(),) if violations is None else violations
    events = preempted(0) + preempted(1)
    schedule = Schedule.parse(PREEMPT_BOTH)
    return Outcome(overall(settled), settled, events, 1.0, schedule, "t.py:f", 5.0, found)


def test_a_sigterm_lightnings_loops_turn_into_exit_0_is_lightnings_19916() -> None:
    """Lightning's handler took the SIGTERM, every rank raised SIGTERMException from its
    loops with no code (exit 0), and exit-status failed the job: Lightning#19916, with the
    workaround that exits 143."""
    outcome = stopped_job([ended(0), ended(1)])
    found = match_known(outcome)
    assert found is not None and found.issue.key == "lightning-sigterm-exit-zero"
    issue = found.issue
    assert "19916" in issue.reference and "21623" in issue.reference
    assert "sys.exit(143)" in issue.workaround
    assert issue.covers("lightning", "2.0.0") and issue.covers("pytorch-lightning", "2.6.6")
    assert not issue.covers("lightning", "1.9.5")  # GracefulExitException before 2.0
    verdict = judge(outcome)
    assert verdict.failed and verdict.known is not None and verdict.known.issue is issue


def test_an_exit_0_the_program_chose_is_not_lightnings_19916() -> None:
    """The program's own sys.exit(0), a SIGTERMException raised outside Lightning's loops,
    one that exits 143 (the fix), or no exit-status finding at all: not Lightning's."""
    assert match_known(stopped_job([ended(0, "SystemExit"), ended(1, "SystemExit")])) is None
    assert match_known(stopped_job([ended(0, loops=False), ended(1, loops=False)])) is None
    assert match_known(stopped_job([ended(0, code=143), ended(1, code=143)])) is None
    assert match_known(stopped_job([ended(0), ended(1)], violations=())) is None


def test_lightnings_exit_0_in_the_first_run_of_a_requeued_job_is_still_19916() -> None:
    """The World requeued the job and its second run finished; the exit-status finding names
    run 1, where Lightning's handler took the SIGTERM: the same known issue, its package
    read from that run."""
    from dataclasses import replace

    first = stopped_job([ended(0), ended(1)], violations=())
    finished = settle([RankResult(0, "passed"), RankResult(1, "passed")])
    label = "run 1 of 2 (then requeued), "
    violation = replace(exits_zero_violation(), message=label + "reports success ...", run=1)  # type: ignore[type-var]
    plan = Schedule.parse(f"restarts 1\n{PREEMPT_BOTH}")
    job = Outcome(overall(finished), finished, [], 1.0, plan, "t.py:f", 5.0, (violation,), (first,))
    found = match_known(job)
    assert found is not None and found.issue.key == "lightning-sigterm-exit-zero"
    assert match_known(replace(job, attempts=(replace(first, events=[]),))) is None


def exited_143(rank: int, handling_lightnings_stop: bool) -> RankResult:
    """A signalled rank that exited 143: from its ``except SIGTERMException`` around
    ``fit`` (the exit-status workaround), or from a SIGTERM handler of its own."""
    site, _ = lightning_site()
    own = '  File "/home/me/project/train.py", line 56, in train\n'
    tb = f"Traceback (most recent call last):\n{own}SystemExit: 143\n"
    if handling_lightnings_stop:
        loop = (
            f'  File "{site}/lightning/pytorch/loops/fit_loop.py", line 503, in on_advance_start\n'
        )
        first = f"Traceback (most recent call last):\n{loop}SIGTERMException\n"
        tb = f"{first}\nDuring handling of the above exception, another exception occurred:\n\n{tb}"
    return RankResult(rank, "failed", ExceptionInfo("SystemExit", "143", tb), ended_s=1.0)


@pytest.mark.parametrize("workaround", [True, False])
def test_lightnings_lone_stop_is_its_own_even_when_the_program_exits_143_from_it(
    workaround: bool,
) -> None:
    """A SIGTERM on rank 1 alone: Lightning's loops stop that rank while rank 0 goes on into
    a collective and is released. The workaround turns the SIGTERMException into exit 143:
    the stop is still Lightning's (a false alarm of the budget campaign on
    known_issues/sigterm_exit_zero:train_fixed); an exit from the program's own handler,
    with no SIGTERMException of Lightning's under it, stays the program's."""
    site, _ = lightning_site()
    tb = (
        "Traceback (most recent call last):\n"
        f'  File "{site}/torch/distributed/distributed_c10d.py", line 3151, in broadcast\n'
        "RuntimeError: Connection closed by peer\n"
    )
    peer = RankResult(
        0, "released", ExceptionInfo("RuntimeError", "Connection closed by peer", tb, True)
    )
    verdict = judged([peer, exited_143(1, workaround)], preempted(1))
    known = verdict.known  # type: ignore[attr-defined]
    if workaround:
        assert known is not None and known.issue.key == "lightning-sigterm-broadcast"
    else:
        assert known is None and verdict.failed, verdict.reason  # type: ignore[attr-defined]
