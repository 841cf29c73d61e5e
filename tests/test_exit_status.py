"""What the launcher sees: each rank's exit status as a scheduler reads it, and the
``exit-status`` check (a job that exits 0 after a preemption or a hard fault must have
finished its planned training, as a fault-free run of it does)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chaoslight import Event, MemoryBudget, Schedule, judge
from chaoslight._report import CRASHED, FAILED, HUNG, PASSED
from chaoslight._report._records import ExceptionInfo, RankResult
from chaoslight._runtime import FIRED, NOTE
from chaoslight._runtime._evidence import OBSERVATION
from chaoslight._runtime._preempt import DELIVERED
from chaoslight._verdict._known import match_known
from chaoslight._verdict._oracle import ANY_END_RULE
from chaoslight.checks import Evidence, ExitStatus, RankView

ROOT = Path(__file__).resolve().parent.parent
KNOWN = f"{ROOT}/examples/known_issues/sigterm_exit_zero.py:"
BUG = f"{ROOT}/examples/bugs/preempt_returns_zero.py:"
OOM_SKIP = f"{ROOT}/examples/corpus/oom_skip.py:train"
PREEMPT = "preempt@lightning.training_step step=3"
RAISE = "raise@lightning.training_step rank=0 step=2 exception=ValueError"


# -- the exit status model ----------------------------------------------------------------


def ended_by(exc: BaseException) -> RankResult:
    return RankResult(0, FAILED, exception=ExceptionInfo.of(exc))


def test_a_rank_exits_as_a_launcher_sees_it() -> None:
    """A return is 0, SystemExit(None) 0 (Lightning's SIGTERMException), SystemExit(143)
    143, another exception 1, SIGKILL 137; a rank the World ended has none."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    assert RankResult(0, PASSED).exit_status == 0
    assert ended_by(SystemExit()).exit_status == 0
    assert ended_by(SIGTERMException()).exit_status == 0
    assert ended_by(SystemExit(143)).exit_status == 143
    assert ended_by(SystemExit(256)).exit_status == 0  # the kernel keeps the low 8 bits
    assert ended_by(SystemExit("bye")).exit_status == 1  # printed, then status 1
    assert ended_by(ValueError("x")).exit_status == 1
    assert RankResult(0, CRASHED, signal=9).exit_status == 137
    assert RankResult(0, HUNG).exit_status is None


def test_the_exit_status_survives_the_trip_to_the_parent() -> None:
    """ExceptionInfo's JSON form keeps the status a rank computed."""
    info = ExceptionInfo.of(SystemExit(143))
    assert ExceptionInfo.from_dict(json.loads(json.dumps(info.to_dict()))).exit_status == 143


# -- the rule on synthetic runs -----------------------------------------------------------


def fit_end(
    steps: int,
    batches: int | None = None,
    max_steps: int = 12,
    max_epochs: int = -1,
    **flags: Any,
) -> dict[str, Any]:
    """Facts the observer records at the end of a fit."""
    batches = steps if batches is None else batches
    facts = {"batches": batches, "global_step": steps, "epochs": 0}
    return facts | {"max_steps": max_steps, "max_epochs": max_epochs} | flags


def observed(rank: int, facts: dict[str, Any]) -> Event:
    detail = json.dumps(facts)
    return Event(OBSERVATION, ExitStatus.name, rank, facts["global_step"], 1.0, 1.0, "", 0, detail)


def delivered(rank: int, step: int = 3, handler: str = "the program") -> Event:
    note = f"{DELIVERED} to rank {rank} at step {step}; handled by {handler}"
    return Event(NOTE, "lightning.training_step", rank, step, 1.0, 1.0, PREEMPT, 0, note)


def fired(fault: str, rank: int = 0, step: int = 2) -> Event:
    return Event(FIRED, fault.split("@")[1].split()[0], rank, step, 1.0, 1.0, fault, 1)


def run(
    fits: list[dict[str, Any]],
    events: list[Event] = (),  # type: ignore[assignment]
    exits: int | None = 0,
    schedule: Any = PREEMPT,
    attempts: tuple[Evidence, ...] = (),
) -> Evidence:
    """A 2-rank run: both ranks end their fits as ``fits`` say and exit with ``exits``."""
    observations = [observed(rank, facts) for facts in fits for rank in (0, 1)]
    status = PASSED if exits == 0 else FAILED
    ranks = {rank: RankView(rank, status, exit_status=exits) for rank in (0, 1)}
    plan = Schedule.parse(schedule) if isinstance(schedule, str) else schedule
    return Evidence([*events, *observations], ranks, plan, "t.py:f", attempts)


class Reruns:
    """A rerun that returns the fault-free reference, counting how often it was asked."""

    def __init__(self, reference: Evidence) -> None:
        self.reference, self.calls = reference, 0

    def __call__(self, schedule: Any = None, **options: Any) -> Evidence:
        self.calls += 1
        return self.reference


def verdict(evidence: Evidence, reference: list[dict[str, Any]] | None = None) -> list[Any]:
    planned = run(reference or [fit_end(12)], schedule=Schedule())
    return ExitStatus().judge_reruns(evidence, Reruns(planned), Path("."))


PREEMPTED = [delivered(0), delivered(1)]


def test_a_preempted_job_that_exits_0_before_its_planned_end_is_a_violation() -> None:
    """Every rank exits 0 after a SIGTERM at step 4 of 12: a violation that holds however the
    run ended, naming the step, the planned end and the scheduler."""
    [violation] = verdict(run([fit_end(4)], PREEMPTED))
    assert violation.any_end and not violation.warning
    assert "reports success (every rank exited 0) after a preemption" in violation.message
    assert "stopped at step 4 of 12: a scheduler would not requeue it" in violation.message
    assert "sys.exit(143)" in violation.cause


def test_a_job_that_exits_143_or_finished_is_not_a_violation() -> None:
    """Exit 143 on the notice is what a correct job does; a notice after the last step
    found a finished job, and its exit 0 is true."""
    assert verdict(run([fit_end(4, raised="SystemExit")], PREEMPTED, exits=143)) == []
    assert verdict(run([fit_end(12)], PREEMPTED)) == []


def test_runs_the_rule_does_not_apply_to_need_no_reference_run() -> None:
    """No fault, a benign one, a small allocation without a budget, a non-zero exit: the
    check returns at once and never runs the reference."""
    for evidence in (
        run([fit_end(4)], schedule=Schedule()),
        run([fit_end(4)], [fired("delay@lightning.training_step seconds=0.1")]),
        run([fit_end(4)], [fired("allocate@lightning.forward nbytes=1024")]),
        run([fit_end(4)], PREEMPTED, exits=1),
    ):
        reruns = Reruns(run([fit_end(12)], schedule=Schedule()))
        assert ExitStatus().judge_reruns(evidence, reruns, Path(".")) == []
        assert reruns.calls == 0


def test_a_hard_fault_then_exit_0_short_of_the_end_is_a_violation() -> None:
    """An injected error the program caught, and a job that then exits 0 at step 2 of 12;
    an allocation under a memory budget is a hard fault too."""
    [violation] = verdict(run([fit_end(2)], [fired(RAISE)], schedule=RAISE))
    assert f"after the injected {RAISE}" in violation.message and violation.any_end
    allocation = "allocate@lightning.forward nbytes=1024"
    budgeted = Schedule(Schedule.parse(allocation).faults, memory_budget=MemoryBudget(2**20))
    assert verdict(run([fit_end(2)], [fired(allocation)], schedule=budgeted))


def test_a_recovery_that_skips_optimizer_steps_still_processes_every_batch() -> None:
    """A skipped step leaves global_step behind but every batch was trained on: finished.
    So is a fit that reached its own max_steps with more batches."""
    assert verdict(run([fit_end(10, batches=12)], [fired(RAISE)], schedule=RAISE)) == []
    skipping = run([fit_end(12, batches=13)], [fired(RAISE)], schedule=RAISE)
    assert verdict(skipping) == []


def test_a_reference_that_stops_by_its_own_decision_is_not_judged() -> None:
    """EarlyStopping, a Timer, or should_stop in the fault-free run: the planned end depends
    on metrics or time, so nothing is judged."""
    short = run([fit_end(4)], PREEMPTED)
    assert verdict(short, [fit_end(9, should_stop=True)]) == []
    assert verdict(short, [fit_end(12, self_stopping=True)]) == []


def test_a_stop_by_should_stop_after_a_hard_fault_alone_is_only_a_warning() -> None:
    """No notice came; the program set should_stop itself, perhaps on metrics the fault
    changed: shown, never a failure. After a preemption the same stop is judged."""
    [warning] = verdict(run([fit_end(5, should_stop=True)], [fired(RAISE)], schedule=RAISE))
    assert warning.warning and "Not judged" in warning.message
    [violation] = verdict(run([fit_end(5, should_stop=True)], PREEMPTED))
    assert not violation.warning


def test_two_fits_compare_fit_by_fit_and_a_retried_fit_is_passed_over() -> None:
    """Pretrain (3 steps) then fine-tune (6): stopping in the fine-tune is named as fit 2
    of 2; a fit that raised and was run again to its end is a finished job."""
    planned = [fit_end(3, max_steps=3), fit_end(6, max_steps=6)]
    short = run([fit_end(3, max_steps=3), fit_end(2, max_steps=6)], PREEMPTED)
    [violation] = verdict(short, planned)
    assert "stopped at step 2 of 6 in fit 2 of 2" in violation.message
    retried = [fit_end(1, max_steps=3, raised="ValueError"), *planned]
    assert verdict(run(retried, [fired(RAISE)], schedule=RAISE), planned) == []
    skipped = run([fit_end(1, max_steps=3, raised="ValueError"), planned[1]], [fired(RAISE)])
    assert verdict(skipped, planned), "a job that skipped its pretraining did not finish"


def test_a_restarted_job_judges_each_run_that_reported_success() -> None:
    """A run that exited 0 after its preemption is the bug even though the World requeued
    it (a real scheduler would not); one that exited 143, then resumed and finished, is not."""
    plan = Schedule.parse(f"restarts 1\n{PREEMPT}")
    first = run([fit_end(4)], PREEMPTED)
    [violation] = verdict(run([fit_end(12)], schedule=plan, attempts=(first,)))
    assert violation.message.startswith("run 1 of 2 (then requeued), reports success")
    stopped = run([fit_end(4, raised="SystemExit")], PREEMPTED, exits=143)
    assert verdict(run([fit_end(12)], schedule=plan, attempts=(stopped,))) == []


def test_no_reference_means_nothing_is_judged() -> None:
    """A fault-free run that fails on its own is no reference: its own verdict reports it."""
    failing = run([fit_end(12)], schedule=Schedule(), exits=1)
    assert ExitStatus().judge_reruns(run([fit_end(4)], PREEMPTED), Reruns(failing), Path(".")) == []


# -- real 2-rank runs -----------------------------------------------------------------------


def judged(world: Any, target: str, schedule: str) -> tuple[Any, Any]:
    outcome = world.run(target, Schedule.parse(schedule), checks=[ExitStatus()], timeout=30)
    return outcome, judge(outcome)


@pytest.mark.slow
def test_lightnings_exit_0_on_sigterm_is_its_known_issue_and_the_twin_passes(world2: Any) -> None:
    """A plain Lightning job preempted at step 3 exits 0 on every rank (SIGTERMException):
    failed by exit-status and set apart as Lightning#19916; exiting 143 passes."""
    outcome, verdict_ = judged(world2, KNOWN + "train_buggy", PREEMPT)
    assert [r.exit_status for r in outcome.ranks] == [0, 0]
    assert verdict_.failed and verdict_.rule == ANY_END_RULE, verdict_.reason
    assert "stopped at step 4 of 12" in verdict_.reason
    found = match_known(outcome)
    assert found is not None and found.issue.key == "lightning-sigterm-exit-zero"
    assert verdict_.known is not None and "19916" in verdict_.known.issue.reference
    outcome, verdict_ = judged(world2, KNOWN + "train_fixed", PREEMPT)
    assert [r.exit_status for r in outcome.ranks] == [143, 143]
    assert not verdict_.failed, verdict_.reason


@pytest.mark.slow
def test_a_programs_own_graceful_stop_that_returns_is_its_bug(world2: Any) -> None:
    """The program's handler stops every rank together and fit returns: exit 0 at step 4 of
    16 is the program's finding, not Lightning's; the twin exits 143 and passes."""
    _, verdict_ = judged(world2, BUG + "train_buggy", PREEMPT)
    assert verdict_.failed and verdict_.known is None, verdict_.reason
    assert "reports success" in verdict_.reason and "step 4 of 16" in verdict_.reason
    _, verdict_ = judged(world2, BUG + "train_fixed", PREEMPT)
    assert not verdict_.failed, verdict_.reason


@pytest.mark.slow
def test_a_recovery_that_skips_a_step_is_not_blamed(world2: Any) -> None:
    """oom_skip's coordinated skip leaves global_step behind and trains on every batch."""
    outcome, verdict_ = judged(world2, OOM_SKIP, "oom@lightning.forward rank=1 step=1")
    assert all(r.status == PASSED for r in outcome.ranks)
    assert not verdict_.failed and outcome.violations == (), verdict_.reason


@pytest.mark.slow
def test_a_requeued_job_is_judged_on_the_run_that_exited_0(world2: Any) -> None:
    """With a restart the World requeues the preempted job, but its first run exited 0:
    found; the twin exits 143, resumes from its snapshot and finishes: clean."""
    plan = f"restarts 1\n{PREEMPT}"
    outcome, verdict_ = judged(world2, BUG + "train_buggy", plan)
    assert verdict_.failed and "run 1 of 2 (then requeued)" in verdict_.reason, verdict_.reason
    outcome, verdict_ = judged(world2, BUG + "train_fixed", plan)
    assert len(outcome.attempts) == 1 and not verdict_.failed, verdict_.reason


@pytest.mark.slow
def test_lightnings_exit_0_before_a_requeue_is_still_its_known_issue(world2: Any) -> None:
    """Requeued by the World after Lightning's exit 0, the job finishes in run 2: the finding
    names run 1 and is still Lightning#19916, reported apart."""
    _, verdict_ = judged(world2, KNOWN + "train_buggy", f"restarts 1\n{PREEMPT}")
    assert verdict_.failed and "run 1 of 2 (then requeued)" in verdict_.reason, verdict_.reason
    assert verdict_.known is not None and verdict_.known.issue.key == "lightning-sigterm-exit-zero"
