"""Metamorphic tests of the oracle, with Hypothesis, over synthetic outcomes and real ones
recorded from 2-rank runs (``tests/outcomes/``): what must not change a verdict, and what
must.

- A fault that did not fire changes nothing.
- A benign fault that fired beside the others changes nothing (but which benign rule
  applies when nothing else fired).
- A known issue's claim reads the ranks' ends and the violations, never the other faults:
  adding a fault leaves its claim as it was.
- Removing the fault the verdict says ended a rank makes that end the program's.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from outcome_records import recorded

from chaoslight import Event, Outcome, Schedule, Verdict, judge
from chaoslight._report._outcome import overall, settle
from chaoslight._report._records import ExceptionInfo, RankResult
from chaoslight._runtime import FIRED, NOTE
from chaoslight._verdict._known import claim_known
from chaoslight._verdict._oracle import By, Rule
from chaoslight.checks import Violation

SITE = "lightning.training_step"
LIGHTNING = "lightning (lightning 2.6.6)"
HANDLER = (
    "/site/lightning/pytorch/trainer/connectors/signal_connector.py",
    "_sigterm_notifier_fn",
)
GLOO = "RuntimeError: Connection closed by peer"
OOM_TEXT = "CUDA out of memory. Tried to allocate 1.0 GiB. [simulated by chaoslight: oom@x]"
RECORDED = recorded()

# Faults the search draws, each on its own rank and step; the oracle reads their class.
HARD = [
    f"oom@{SITE} rank={{rank}} step=2",
    f"raise@{SITE} rank={{rank}} step=2",
    f"crash@{SITE} rank={{rank}} step=2",
    f"freeze@{SITE} rank={{rank}} step=2 seconds=0.5",
    "repeat_batch@lightning.next_batch rank={rank} step=1",
    f"allocate@{SITE} rank={{rank}} step=2 nbytes=1073741824",
]
BENIGN = [
    f"delay@{SITE} rank={{rank}} step=1 seconds=0.1",
    "reorder@dist.all_reduce step=1 order=reversed",
    f"allocate@{SITE} rank={{rank}} step=1 nbytes=1024",
]
SILENT = [f"flip@{SITE} rank={{rank}} step=0 target=optimizer_state bit=sign"]


def fired(rank: int, fault: str, step: int = 1, time: float = 1.0) -> Event:
    return Event(FIRED, fault.split("@")[1].split()[0], rank, step, time, time, fault, 1)


def failed(rank: int, kind: str, message: str, distributed: bool = False) -> RankResult:
    frame = '  File "/home/me/train.py", line 9, in f\n'
    tb = f"Traceback (most recent call last):\n{frame}{kind}: {message}"
    return RankResult(rank, "failed", ExceptionInfo(kind, message, tb, distributed), ended_s=1.0)


def stacked(rank: int, *frames: tuple[str, str]) -> RankResult:
    lines = "".join(f'  File "{path}", line 1 in {function}\n' for path, function in frames)
    stacks = f"Thread 0x1 (most recent call first):\n{lines}"
    return RankResult(rank, "hung", evidence=f"rank {rank} waits", stacks=stacks)


ENDS = {
    "passed": lambda rank: RankResult(rank, "passed", ended_s=2.0),
    "own error": lambda rank: failed(rank, "ValueError", "loss went missing"),
    "oom": lambda rank: failed(rank, "OutOfMemoryError", OOM_TEXT),
    "released": lambda rank: failed(rank, "RuntimeError", GLOO, distributed=True),
    "hung": lambda rank: RankResult(rank, "hung", evidence=f"rank {rank} waits in dist.barrier #3"),
    "crashed": lambda rank: RankResult(rank, "crashed", signal=9, ended_s=1.0),
}


def build(ranks: list[RankResult], events: list[Event], texts: list[str], violations=()) -> Outcome:  # type: ignore[no-untyped-def]
    settled = settle(list(ranks))
    status = overall(settled)
    if violations and status == "passed":
        status = "failed"  # type: ignore[assignment]
    schedule = Schedule.parse("\n".join(dict.fromkeys(texts)))
    return Outcome(status, settled, list(events), 1.0, schedule, "t.py:f", 10.0, tuple(violations))


@st.composite
def outcomes(draw: st.DrawFn) -> Outcome:
    """Two ranks with drawn ends, zero to two faults fired on drawn ranks, maybe a violation."""
    ends = [draw(st.sampled_from(sorted(ENDS))) for _ in range(2)]
    chosen = draw(st.lists(st.sampled_from(HARD + BENIGN + SILENT), max_size=2, unique=True))
    texts = [c.format(rank=draw(st.integers(0, 1))) for c in chosen]
    events = [fired(int(t.split("rank=")[1][0]) if "rank=" in t else 0, t) for t in texts]
    violations = draw(
        st.lists(
            st.sampled_from(
                [
                    Violation("replicas-in-sync", "parameter 'w' differs", rank=1, step=3),
                    Violation("exit-status", "reports success early", rank=0, any_end=True),
                ]
            ),
            max_size=1,
        )
    )
    return build([ENDS[e](r) for r, e in enumerate(ends)], events, texts, violations)


def decision(verdict: Verdict) -> tuple[bool, bool, str | None, Rule]:
    """What a verdict decided: failed, internal, the known issue, the rule."""
    known = verdict.known.issue.key if verdict.known else None
    return (verdict.failed, verdict.internal, known, verdict.rule)


def same(a: Verdict, b: Verdict) -> bool:
    key_a = a.known.issue.key if a.known else None
    key_b = b.known.issue.key if b.known else None
    return (a.failed, a.internal, key_a, a.reason) == (b.failed, b.internal, key_b, b.reason)


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(outcome=outcomes(), extra=st.sampled_from(HARD + BENIGN + SILENT), rank=st.integers(0, 1))
def test_a_fault_that_did_not_fire_changes_nothing(outcome: Outcome, extra: str, rank: int) -> None:
    """The same run with one more scheduled fault that never fired: the same verdict."""
    text = extra.format(rank=rank)
    if text in outcome.schedule.to_text():
        return
    more = replace(outcome, schedule=Schedule.parse(f"{outcome.schedule.to_text()}\n{text}"))
    assert same(judge(outcome), judge(more))


@SETTINGS
@given(outcome=outcomes(), extra=st.sampled_from(BENIGN), rank=st.integers(0, 1))
def test_a_benign_fault_beside_others_changes_nothing(
    outcome: Outcome, extra: str, rank: int
) -> None:
    """One more benign fault fired: whether the run failed, by which rule and known issue,
    is unchanged (only the rule's name moves from "no fault" to "only benign faults" when
    nothing else fired)."""
    text = extra.format(rank=rank)
    if text in outcome.schedule.to_text():
        return
    events = [*outcome.events, fired(rank, text, time=0.5)]
    more = replace(
        outcome, events=events, schedule=Schedule.parse(f"{outcome.schedule.to_text()}\n{text}")
    )
    before, after = judge(outcome), judge(more)
    assert (before.failed, before.internal) == (after.failed, after.internal)
    assert decision(before)[2] == decision(after)[2]  # the same known issue, or none
    if before.rule != Rule.NO_FAULT:  # (the reason may name a step the delay's event shows)
        assert decision(before) == decision(after)


def test_a_small_allocation_excuses_no_error_beside_a_freeze() -> None:
    """Found by the test above: rank 0 frozen (then killed), rank 1 failed with an OOM that
    no fault of its own raised. A 1 KiB allocation fired on rank 1 under no budget (benign:
    it can fail nothing) left the peer's OOM the program's finding, as it was without it."""
    freeze = f"freeze@{SITE} rank=0 step=2 seconds=0.5"
    ranks = [ENDS["crashed"](0), ENDS["oom"](1)]
    alone = build(ranks, [fired(0, freeze)], [freeze])
    small = BENIGN[2].format(rank=1)
    beside = build(ranks, [fired(0, freeze), fired(1, small, time=0.5)], [freeze, small])
    assert judge(alone).failed and judge(beside).failed
    assert decision(judge(alone)) == decision(judge(beside))


def _shifted(extra_ranks: list[RankResult]) -> Outcome:
    """Lightning 2.6.6's handler took a SIGTERM on every rank; rank 0 waits in the handler's
    broadcast, rank 1 in its DDP backward."""
    notes = [
        Event(
            NOTE,
            SITE,
            r,
            1,
            1.1,
            1.1,
            f"preempt@{SITE} step=1",
            0,
            f"SIGTERM delivered to rank {r} at step 1; handled by {LIGHTNING}",
        )
        for r in (0, 1)
    ]
    events = [fired(r, f"preempt@{SITE} step=1") for r in (0, 1)] + notes
    ranks = [
        stacked(0, ("/site/torch/distributed/distributed_c10d.py", "broadcast"), HANDLER),
        stacked(1, ("/site/torch/autograd/graph.py", "_engine_run_backward")),
        *extra_ranks,
    ]
    return build(ranks, events, [f"preempt@{SITE} step=1"])


@SETTINGS
@given(
    extra=st.lists(st.sampled_from(HARD + BENIGN + SILENT), min_size=1, max_size=3, unique=True),
    rank=st.integers(0, 1),
)
def test_a_known_issues_claim_is_unchanged_by_other_faults(extra: list[str], rank: int) -> None:
    """Lightning's handler broadcast shifted the ranks' collectives: its claim (rank 0's and
    rank 1's ends) and the verdict's "known" stay whatever other faults fired beside it."""
    outcome = _shifted([])
    texts = [e.format(rank=rank) for e in extra]
    more = replace(
        outcome,
        events=[*outcome.events, *(fired(rank, t, time=0.9) for t in texts)],
        schedule=Schedule.parse("\n".join([outcome.schedule.to_text(), *texts])),
    )
    before = [(c.issue.key, c.claimed) for c in claim_known(outcome)]
    after = [(c.issue.key, c.claimed) for c in claim_known(more)]
    assert before == after and before
    verdict = judge(more)
    assert verdict.failed and verdict.known is not None, verdict.reason
    assert verdict.known.issue.key == "lightning-sigterm-broadcast"


@pytest.mark.parametrize("end", ["oom", "crashed"])
def test_removing_the_fault_that_ended_a_rank_makes_its_end_the_programs(end: str) -> None:
    """Rank 1 ended by its injected fault, rank 0 released: allowed. Without that fault's
    firing the same ends are the program's."""
    fault = f"{end if end == 'oom' else 'crash'}@{SITE} rank=1 step=2"
    ranks = [ENDS["released"](0), ENDS[end](1)]
    with_fault = judge(build(ranks, [fired(1, fault)], [fault]))
    assert not with_fault.failed
    assert any(a.by == By.FAULT and a.symptom.rank == 1 for a in with_fault.accounts)
    without = judge(build(ranks, [], []))
    assert without.failed and without.findings


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_recorded_outcomes_keep_their_verdict_under_unfired_and_benign_faults(name: str) -> None:
    """A real run judged again with a fault that never fired added, and with a benign delay
    that fired added: the same verdict."""
    outcome = RECORDED[name]
    base = judge(outcome)
    unfired = f"oom@{SITE} rank=1 step=999"
    more = replace(outcome, schedule=Schedule.parse(f"{outcome.schedule.to_text()}\n{unfired}"))
    assert same(base, judge(more))
    delay = f"delay@{SITE} rank=0 step=0 seconds=0.05"
    first = min((e.time for e in outcome.events), default=1.0) - 0.01
    delayed = replace(
        outcome,
        events=[fired(0, delay, step=0, time=first), *outcome.events],
        schedule=Schedule.parse(f"{outcome.schedule.to_text()}\n{delay}"),
    )
    after = judge(delayed)
    assert (base.failed, base.known is None) == (after.failed, after.known is None)


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_every_recorded_failure_accounts_for_each_symptom(name: str) -> None:
    """Each symptom of a recorded run has one explanation; a failed verdict of the
    program's names at least one the program owns, a known one none."""
    verdict = judge(RECORDED[name])
    assert verdict.accounts or not verdict.failed
    if verdict.failed and verdict.known is None and not verdict.internal:
        assert verdict.findings, verdict.accounts
    if verdict.known is not None:
        assert not verdict.findings, verdict.accounts
