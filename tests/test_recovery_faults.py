"""Faults during recovery: ``run=2`` binds a fault to the restarted run, ``run=every`` to
each run; the World fires each in its run(s) only, the search draws them, and a resume
that falls back on one rank alone is found while its agreeing twin is clean."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import Phase, find, given, settings

import chaoslight
from chaoslight import Event, InvalidArgument, InvalidSchedule, Outcome, Raise, Schedule, judge
from chaoslight._report._records import RankResult
from chaoslight._runtime import FIRED
from chaoslight._search._reach import Reach
from chaoslight._world._restart import run_with_restarts
from chaoslight.strategies import schedules

CRASH = "crash@lightning.training_step rank=0 step=3"
AGAIN = "raise@torch.load rank=1 run=2"
PAIR = "examples/restart/resume_fallback.py:"
REACH = Reach(points=tuple(("lightning.training_step", step) for step in range(4)))
# Generate and shrink, without Hypothesis's explain phase (most of a find's time here).
FIND = settings(database=None, max_examples=2000, phases=[Phase.generate, Phase.shrink])


def test_a_bound_fault_round_trips_in_the_text_and_json_forms() -> None:
    """run=2 and run=every are written in both forms and read back unchanged."""
    schedule = Schedule.parse(f"restarts 2\n{CRASH}\n{AGAIN}\nraise@torch.load run=every")
    assert [f.run for f in schedule] == [None, 2, "every"]
    assert schedule.to_text().splitlines()[2:] == [AGAIN, "raise@torch.load run=every"]
    assert Schedule.from_json(schedule.to_json()) == schedule
    assert Schedule.parse(schedule.to_text()) == schedule


def test_json_names_a_run_only_for_a_bound_fault() -> None:
    """An unbound fault's JSON reads as it always did; a bound one carries its run."""
    faults = Schedule.parse(f"restarts 1\n{CRASH}\n{AGAIN}").to_dict()["faults"]
    assert "run" not in faults[0] and faults[1]["run"] == 2


def test_a_run_past_the_last_restart_is_refused() -> None:
    """run=3 in a schedule of two runs can never fire: one line says the restarts needed."""
    with pytest.raises(InvalidSchedule, match=r"run=3 needs restarts>=2; the schedule has"):
        Schedule.parse("restarts 1\nraise@torch.load run=3")
    with pytest.raises(InvalidSchedule, match="run=2 needs restarts>=1"):
        Schedule([Raise("RuntimeError", site="torch.load", run=2)])


@pytest.mark.parametrize("bad", [0, 5, "twice", True, 2.0])
def test_a_run_that_is_no_run_is_refused(bad: Any) -> None:
    """A run is a number from 1 to 4 or 'every', named in a one-line error."""
    with pytest.raises(InvalidArgument, match=r"^run=.* must be a run number from 1 to 4"):
        Raise("RuntimeError", site="torch.load", run=bad)


class FakeJob:
    """Stands in for a World's runs: records what each run was handed, and fires in run
    ``n`` the faults ``fires[n]`` names (their text as that run was handed them)."""

    def __init__(self, fires: dict[int, list[tuple[int, str]]], passes_in: int = 99) -> None:
        self.fires, self.passes_in, self.handed = fires, passes_in, []

    def __call__(self, schedule: Schedule, workdir: Path) -> Outcome:
        self.handed.append([str(f) for f in schedule])
        number = len(self.handed)
        events = [
            Event(FIRED, "torch.load", rank, None, 1.0, 1.0, text, 1)
            for rank, text in self.fires.get(number, [])
        ]
        status = "passed" if number >= self.passes_in else "crashed"
        ranks = (RankResult(0, status), RankResult(1, status))
        return Outcome(status, ranks, events, 1.0, schedule)


def test_a_fault_bound_to_run_2_is_handed_to_run_2_only(tmp_path: Path) -> None:
    """Run 1 gets the crash, run 2 the bound fault (not the spent crash); the events and
    the verdict name it by its bound text, fired, not "never fired"."""
    job = FakeJob({1: [(0, CRASH)], 2: [(1, "raise@torch.load rank=1")]})
    plan = Schedule.parse(f"restarts 1\n{CRASH}\n{AGAIN}")
    outcome = run_with_restarts(job, plan, tmp_path, 2)
    assert job.handed == [[CRASH], ["raise@torch.load rank=1"]]
    assert [e.fault for e in outcome.events if e.kind == FIRED] == [AGAIN]
    verdict = judge(outcome)
    assert (1, AGAIN) in verdict.fired and verdict.never_fired == ()


def test_an_every_run_fault_fires_in_each_run_with_its_times(tmp_path: Path) -> None:
    """run=every is handed whole to every run: firing in run 1 does not spend it."""
    every = "raise@torch.load rank=0 run=every"
    fired = [(0, "raise@torch.load rank=0")]
    job = FakeJob({1: fired, 2: fired, 3: fired})
    outcome = run_with_restarts(job, Schedule.parse(f"restarts 2\n{every}"), tmp_path, 2)
    assert job.handed == [["raise@torch.load rank=0"]] * 3
    assert all(e.fault == every for run in (*outcome.attempts, outcome) for e in run.events)


def test_a_run_that_never_came_is_named_in_the_verdict(tmp_path: Path) -> None:
    """A job that passed in run 1 was never restarted: the run=2 fault's note says so."""
    job = FakeJob({}, passes_in=1)
    outcome = run_with_restarts(job, Schedule.parse(f"restarts 1\n{AGAIN}"), tmp_path, 2)
    assert job.handed == [[]]
    verdict = judge(outcome)
    assert not verdict.failed and verdict.never_fired == (AGAIN,)
    assert "run 2 never came: the job passed in run 1" in verdict.notes[0]


@settings(max_examples=60, database=None)
@given(schedule=schedules(world_size=2, reach=REACH))
def test_a_bound_fault_always_has_a_run_to_fire_in(schedule: Schedule) -> None:
    """Faults are bound to run 2 only with a restart, and never all of the faults that
    could end run 1 (then no restart would come)."""
    bound = [f for f in schedule if f.run is not None]
    assert all(f.run == 2 for f in bound)
    assert not bound or (schedule.restarts == 1 and len(bound) < len(schedule))


@pytest.mark.slow  # seconds of real runs: the fast loop stays under a minute
def test_the_search_draws_a_fault_where_a_resumed_run_reads_its_checkpoint() -> None:
    """With a baseline's reach (which never loads a checkpoint) the search still draws
    a run-2 fault at the load sites, at no step: whenever the resume reaches them."""
    found = find(
        schedules(world_size=2, reach=REACH, faults=["crash", "raise"], max_faults=2),
        lambda s: any(f.site == "torch.load" and f.run == 2 for f in s),
        settings=FIND,
    )
    resume = [f for f in found if f.run == 2]
    assert found.restarts == 1 and len(resume) == 1 and resume[0].step is None


def test_a_drawn_restart_shrinks_to_unbound_faults() -> None:
    """The simplest schedule with a restart binds nothing: binding shrinks away."""
    found = find(
        schedules(world_size=2, reach=REACH, faults=["crash", "raise"], max_faults=2),
        lambda s: s.restarts == 1,
        settings=FIND,
    )
    assert all(f.run is None for f in found)


@pytest.mark.usefixtures("lightning_in_process")
def test_inject_makes_one_run_so_a_run_2_fault_never_fires(rank_env: Any) -> None:
    """inject() has no restarts: a fault bound to run 2 stays unfired, and the note says
    why (a run=1 fault in the same schedule fires)."""
    from helpers import fit

    first = Raise(OSError(28, "No space left on device"), site="lightning.training_step", step=1)
    again = Raise("RuntimeError", site="lightning.training_step", step=0, run=2)
    with pytest.raises(OSError), chaoslight.inject(Schedule([first, again], restarts=1)) as run:
        fit()
    assert [e.fault for e in run.fired()] == [str(first)]
    notes = [e.detail for e in run.events if e.kind == "unfired"]
    assert notes and "run=2 binds it to run 2" in notes[0] and "inject()" in notes[0]


@pytest.mark.slow
@pytest.mark.parametrize(("function", "fails"), [("train_buggy", True), ("train_fixed", False)])
def test_a_resume_that_falls_back_alone_is_found(world2: Any, function: str, fails: bool) -> None:
    """A crash, a restart, and an error reading the resume file on rank 1 in run 2: the
    rank that falls back alone hangs the job (named as run 2, cause first); the twin whose
    ranks agree recovers consistently."""
    plan = Schedule.parse(f"restarts 1\n{CRASH}\n{AGAIN}")
    outcome = world2.run(PAIR + function, plan, timeout=5)
    verdict = judge(outcome)
    assert len(outcome.attempts) == 1 and verdict.failed == fails, verdict.reason
    assert [e.fault for e in outcome.events if e.kind == FIRED] == [AGAIN]
    if fails:
        assert verdict.reason.startswith(
            f"run 2 of 2 (a restart): rank 1 caught the injected {AGAIN}"
        )


@pytest.mark.slow
def test_the_default_search_finds_the_resume_that_falls_back_alone(
    world2: chaoslight.World,
) -> None:
    """``chaoslight fuzz`` with no options finds the buggy resume with a run-2 fault (the
    failed-resume probe: a crash after the first checkpoint, then a failed load)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    options = {"seed": 0, "replays": 0, "timeout": 5.0, "max_examples": 10, "world": world2}
    result, _ = chaoslight.fuzz(PAIR + "train_buggy", **options)
    assert result.verdict is not None and result.verdict.failed
    assert any(f.run == 2 and f.site == "torch.load" for f in result.schedule), result.schedule
