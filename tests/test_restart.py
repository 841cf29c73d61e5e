"""Restarts: ``Schedule(restarts=N)`` runs the job again in the same directory after a run
that did not pass; each fault fires once over all runs; the restart must succeed."""

from __future__ import annotations

from typing import Any

import pytest

import chaoslight
from chaoslight import Event, InvalidArgument, InvalidSchedule, Outcome, Schedule, judge
from chaoslight._report._records import ExceptionInfo, RankResult
from chaoslight._runtime import FIRED
from chaoslight._world._restart import remaining

CRASH = "crash@torch.save rank=0 step=3"
TARGET = "examples/restart/side_checkpoint.py:"


def test_restarts_have_a_text_and_a_json_form() -> None:
    """'restarts N' is a line of the text form and a key of the JSON form; both round-trip."""
    schedule = Schedule.parse(f"restarts 2\n{CRASH}")
    assert schedule.restarts == 2 and schedule.to_text().splitlines()[0] == "restarts 2"
    assert Schedule.from_json(schedule.to_json()) == schedule


@pytest.mark.parametrize("bad", [-1, 4, "1", 1.0])
def test_restarts_out_of_range_are_refused_with_the_argument_named(bad: Any) -> None:
    """restarts must be a whole number from 0 to 3, named in the one-line error."""
    with pytest.raises(InvalidArgument, match="restarts="):
        Schedule(restarts=bad)


def test_a_restarts_line_without_a_number_is_refused() -> None:
    """'restarts two' is a schedule error that says the form it expects."""
    with pytest.raises(InvalidSchedule, match="must be 'restarts N'"):
        Schedule.parse("restarts two")


def _fired(rank: int, fault: str) -> Event:
    return Event(FIRED, "torch.save", rank, 3, 1.0, 1.0, fault, 1)


def _run(events: list[Event], status: str = "crashed") -> Outcome:
    ranks = (RankResult(0, status), RankResult(1, "failed" if status != "passed" else status))
    return Outcome(status, ranks, events, 1.0, Schedule.parse(CRASH))


def test_a_fault_that_fired_is_spent_for_the_restart() -> None:
    """The restarted run does not crash again at the step it crashed at."""
    assert remaining(Schedule.parse(CRASH), _run([_fired(0, CRASH)]), 2).faults == ()


def test_a_fault_for_every_rank_goes_on_for_the_ranks_it_missed() -> None:
    """A crash meant for every rank that fired on rank 0 only is left for rank 1."""
    every = "crash@torch.save step=3"
    left = remaining(Schedule.parse(every), _run([_fired(0, every)]), 2)
    assert [str(f) for f in left] == ["crash@torch.save rank=1 step=3"]


def test_a_failed_restart_is_named_as_the_restart() -> None:
    """The verdict says which run failed: the restart after the crash."""
    first = _run([_fired(0, CRASH)])

    error = ExceptionInfo("RuntimeError", "PytorchStreamReader failed reading zip archive")
    ranks = (RankResult(0, "failed", error), RankResult(1, "failed", error))
    final = Outcome("failed", ranks, [], 1.0, Schedule.parse(f"restarts 1\n{CRASH}"))
    verdict = judge(Outcome(**{**final.__dict__, "attempts": (first,)}))
    assert verdict.failed and verdict.reason.startswith("run 2 of 2 (a restart)")
    assert verdict.never_fired == ()  # the crash fired, in the first run


@pytest.mark.slow
def test_a_truncating_side_checkpoint_breaks_the_restart(world2: Any) -> None:
    """A crash inside torch.save of an in-place write leaves a file the restart cannot load."""
    outcome = world2.run(TARGET + "train_buggy", Schedule.parse(f"restarts 1\n{CRASH}"), timeout=10)
    verdict = judge(outcome)
    assert len(outcome.attempts) == 1 and verdict.failed
    assert "a restart" in verdict.reason and "zip archive" in verdict.reason


@pytest.mark.slow
def test_an_atomic_side_checkpoint_survives_two_crash_and_restart_cycles(world2: Any) -> None:
    """Two crashes at two steps, two restarts: the atomic twin ends passing, every run judged."""
    text = f"restarts 2\n{CRASH}\ncrash@lightning.training_step rank=1 step=6"
    outcome = world2.run(TARGET + "train_fixed", Schedule.parse(text), timeout=10)
    assert [a.status for a in outcome.attempts] == ["crashed", "crashed"]
    assert outcome.status == "passed" and not judge(outcome).failed


CALLBACK = "examples/restart/callback_state.py:"
CRASH_IN_EPOCH_2 = "restarts 1\ncrash@lightning.training_step rank=0 step=6"


@pytest.mark.slow
def test_callback_state_missing_from_the_checkpoint_ends_elsewhere(world2: Any) -> None:
    """With resume-equivalence, a restart that loses a callback's counter is a finding."""
    from chaoslight.checks import ResumeEquivalence

    schedule = Schedule.parse(CRASH_IN_EPOCH_2)
    buggy = world2.run(CALLBACK + "train_buggy", schedule, timeout=10, checks=[ResumeEquivalence()])
    verdict = judge(buggy)
    assert verdict.failed and "ends differently" in verdict.reason
    fixed = world2.run(CALLBACK + "train_fixed", schedule, timeout=10, checks=[ResumeEquivalence()])
    assert not judge(fixed).failed, fixed.report()


@pytest.mark.slow
def test_resume_equivalence_judges_no_restart_whose_fault_changed_training(world2: Any) -> None:
    """A repeated batch trains the job on other data than the fault-free reference: the
    restart is not judged by its weights (a false alarm of the default-budget campaign)."""
    from chaoslight.checks import ResumeEquivalence

    text = (
        "restarts 1\nrepeat_batch@lightning.next_batch rank=0 step=0\n"
        + CRASH_IN_EPOCH_2.split("\n")[1]
    )
    fixed = world2.run(
        CALLBACK + "train_fixed", Schedule.parse(text), timeout=10, checks=[ResumeEquivalence()]
    )
    assert fixed.attempts and not fixed.violations, fixed.report()
    assert not judge(fixed).failed, fixed.report()


@pytest.mark.slow
def test_a_preempted_job_resumes_from_its_own_snapshot(world2: Any) -> None:
    """Preempt then restart: the agreement's snapshot is what the restarted job resumes;
    the preempted run told its launcher it did not finish (exit status 143)."""
    from chaoslight.checks import ResumeEquivalence

    text = "restarts 1\npreempt@lightning.training_step step=3"
    target = "examples/catalogue/preemption.py:train_fixed"
    checks = [ResumeEquivalence()]
    outcome = world2.run(target, Schedule.parse(text), timeout=10, checks=checks)
    assert [a.status for a in outcome.attempts] == ["failed"] and outcome.status == "passed"
    assert [r.exit_status for r in outcome.attempts[0].ranks] == [143, 143]
    verdict = judge(outcome)
    assert not verdict.failed, verdict.reason
    # It resumed mid-epoch from its snapshot: a plain loader cannot, Lightning warns.
    assert any("dataloader is not resumable" in note for note in verdict.notes), verdict.notes


@pytest.mark.slow
def test_checks_that_rerun_the_example_rerun_its_restarts_too(world2: Any) -> None:
    """deterministic reruns a schedule with restarts as a whole: the same runs, the same end."""
    from chaoslight.checks import Deterministic

    schedule = Schedule.parse(f"restarts 1\n{CRASH}")
    outcome = world2.run(TARGET + "train_fixed", schedule, timeout=10, checks=[Deterministic()])
    assert len(outcome.attempts) == 1 and outcome.passed, outcome.report()
    assert not judge(outcome).failed


@pytest.fixture
def world(world2: Any) -> Any:
    """The session's 2-rank World, for this module's campaigns."""
    return world2


def _fuzz(target: str, world: Any, examples: int = 4, seconds: float = 40) -> Any:
    options = {"max_examples": examples, "max_time": seconds, "seed": 0, "replays": 0}
    result, _ = chaoslight.fuzz(target, world=world, **options)
    return result


@pytest.mark.slow
def test_the_default_search_finds_the_truncating_side_checkpoint(world: Any) -> None:
    """Default fuzz: its crash-in-save-then-restart probe breaks the in-place writer; the
    atomic twin comes out clean."""
    buggy = _fuzz(TARGET + "train_buggy", world)
    assert buggy.status == "failed" and buggy.schedule.restarts == 1, buggy.verdict
    assert "a restart" in buggy.verdict.reason
    assert any(f.kind == "crash" and f.site == "torch.save" for f in buggy.schedule)
    # The twin's first probes (the crash-in-save ones among them), for the suite's time;
    # test_an_atomic_side_checkpoint_survives_two_crash_and_restart_cycles goes further.
    assert _fuzz(TARGET + "train_fixed", world, examples=2, seconds=6).status == "clean"
