"""The campaign's decisions with scripted runners: baseline, flaky, internal, fresh replays."""

from __future__ import annotations

from typing import Any

from chaoslight.strategies import schedules

from chaoslight import Schedule
from chaoslight._search import Campaign
from chaoslight._search._campaign import BASELINE, CLEAN, FAILED, FLAKY, INTERNAL
from chaoslight._search._oracle import Verdict

STRATEGY = schedules(world_size=2, steps=4, faults=["oom", "delay"], sites=["lightning.forward"])


class Scripted:
    """A runner whose verdict is a function of the schedule and how often it was run."""

    def __init__(self, fails: Any) -> None:
        self.fails = fails
        self.calls: list[tuple[Schedule, bool]] = []

    def __call__(self, schedule: Schedule, fresh: bool = False) -> tuple[Verdict, None]:
        self.calls.append((schedule, fresh))
        bad = self.fails(schedule, len(self.calls))
        verdict = Verdict(bad, "boom" if bad else "", "failed" if bad else "passed")
        return verdict, None


def has_oom(schedule: Schedule) -> bool:
    return any(f.kind == "oom" for f in schedule)


def campaign(runner: Scripted, replays: int = 3) -> Any:
    return Campaign(runner, STRATEGY, max_examples=200, seed=1, replays=replays).execute()


def test_the_empty_schedule_runs_first_twice() -> None:
    """Every campaign starts with two runs of the empty schedule, before any fault."""
    runner = Scripted(lambda s, n: has_oom(s))
    result = campaign(runner)
    assert [len(s) for s, _ in runner.calls[:2]] == [0, 0]
    assert result.status == FAILED and result.minimal


def test_a_target_failing_with_no_fault_is_reported_with_the_empty_schedule() -> None:
    """A failing baseline is reported as such, never blamed on a fault, and never searched."""
    runner = Scripted(lambda s, n: True)
    result = campaign(runner)
    assert result.status == BASELINE and len(result.schedule) == 0
    assert all(len(s) == 0 for s, _ in runner.calls)
    assert not result.minimal


def test_a_failure_that_does_not_replay_is_flaky_never_minimal() -> None:
    """Planted nondeterminism: a schedule that fails once and then passes is flaky."""
    seen: dict[str, int] = {}

    def fails_first_time_only(schedule: Schedule, n: int) -> bool:
        key = schedule.to_text()
        seen[key] = seen.get(key, 0) + 1
        return has_oom(schedule) and seen[key] == 1

    result = campaign(Scripted(fails_first_time_only))
    assert result.status == FLAKY and not result.minimal
    assert any(not r.failed for r in result.replays)


def test_a_flaky_baseline_is_flaky_with_the_empty_schedule() -> None:
    """An empty schedule failing once in two runs is a flaky target, not a finding."""
    result = campaign(Scripted(lambda s, n: n == 2))
    assert result.status == FLAKY and len(result.schedule) == 0


def test_the_first_replay_runs_in_a_fresh_world() -> None:
    """Before a failure is reported, its first replay asks the runner for a fresh World."""
    runner = Scripted(lambda s, n: has_oom(s))
    result = campaign(runner, replays=2)
    fresh = [schedule for schedule, is_fresh in runner.calls if is_fresh]
    assert result.status == FAILED and fresh == [result.schedule]


def test_an_internal_error_stops_the_search_and_is_not_a_finding() -> None:
    """A verdict marked internal ends the campaign as INTERNAL, without minimising."""

    def runner(schedule: Schedule, fresh: bool = False) -> tuple[Verdict, None]:
        broken = has_oom(schedule)
        verdict = Verdict(broken, "internal error in chaoslight: x", "failed", internal=broken)
        return verdict, None

    result = Campaign(runner, STRATEGY, max_examples=50, seed=1, replays=1).execute()
    assert result.status == INTERNAL and not result.minimal


def test_a_passing_target_is_clean_after_its_budget() -> None:
    """Nothing failing: the campaign ends clean after its examples."""
    result = campaign(Scripted(lambda s, n: False))
    assert result.status == CLEAN and result.schedule is None


def test_a_delay_is_shortened_to_a_clear_step_past_its_threshold() -> None:
    """A 3 s straggler that fails from 0.25 s on is reported one grid point above the
    smallest failing one (0.3 s, so 0.5 s): it does not sit on the threshold in a replay."""
    from chaoslight._search._minimize import shorten_delays

    schedule = Schedule.parse("delay@lightning.on_train_epoch_end rank=0 step=7 seconds=3")
    shortened = shorten_delays(schedule, lambda s: s.faults[0].seconds >= 0.25)
    assert shortened.faults[0].seconds == 0.5
    assert shorten_delays(schedule, lambda s: s.faults[0].seconds >= 3) == schedule


def test_progress_names_each_phase_as_the_campaign_enters_it() -> None:
    """The live display says baseline for the two empty runs, then generating, then the
    phases of a failure: never 'baseline' while faults are being tried."""
    runner = Scripted(lambda s, n: has_oom(s))
    seen: list[tuple[str, int]] = []
    Campaign(
        runner,
        STRATEGY,
        max_examples=200,
        seed=1,
        replays=1,
        on_progress=lambda progress: seen.append((progress.phase, progress.examples)),
    ).execute()
    phases = [phase for phase, _ in seen]
    assert seen[:4] == [("baseline", 0), ("baseline", 1), ("baseline", 2), ("generating", 2)]
    assert all(phase != "baseline" for phase, examples in seen if examples > 2)
    assert "shrinking" in phases or "minimising" in phases
