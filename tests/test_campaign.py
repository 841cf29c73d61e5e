"""The campaign's decisions with scripted runners: baseline, flaky, internal, fresh replays,
the shared database's failures (within the time, by shard), the result before the database."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from chaoslight import Schedule, Settings, Verdict
from chaoslight._search import Campaign
from chaoslight._search._campaign import (
    BASELINE,
    CLEAN,
    FLAKY,
    FLAKY_BASELINE,
    FOUND,
    INTERNAL_ERROR,
)
from chaoslight._search._database import in_shard, known_failures, open_database, remember
from chaoslight._search._reach import Reach
from chaoslight.strategies import schedules

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
    settings = Settings(max_examples=200, seed=1, replays=replays)
    return Campaign(runner, STRATEGY, settings).execute()


def test_the_empty_schedule_runs_first_twice() -> None:
    """Every campaign starts with two runs of the empty schedule, before any fault."""
    runner = Scripted(lambda s, n: has_oom(s))
    result = campaign(runner)
    assert [len(s) for s, _ in runner.calls[:2]] == [0, 0]
    assert result.status == FOUND and result.minimal


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


def test_a_flaky_baseline_is_the_programs_own_race_with_its_rate() -> None:
    """An empty schedule failing in one of its runs is a finding of its own (not a flaky
    fault), with the rate of its fault-free runs."""
    result = campaign(Scripted(lambda s, n: n == 2))
    assert result.status == FLAKY_BASELINE and len(result.schedule) == 0
    assert result.no_fault_rate == (1, 5)  # the two baseline runs and three replays
    assert result.rate_line() == "failed in 1 of 5 runs with no fault"


def test_a_delay_inside_the_race_becomes_the_schedule_that_fails_every_time() -> None:
    """Of the benign probes, the straggler that makes the sometimes-failing target fail in
    every run is reported as its schedule; a probe that does not decide the race is passed."""
    inside = Schedule.parse("delay@lightning.on_train_epoch_end rank=0 step=1 seconds=2")
    outside = Schedule.parse("delay@lightning.on_train_start rank=1 seconds=2")
    oom = Schedule.parse("oom@lightning.forward rank=0 step=0")

    def racy(schedule: Schedule, n: int) -> bool:
        return schedule == inside or (not schedule and n == 1)

    runner = Scripted(racy)
    settings = Settings(max_examples=20, seed=1, replays=2)
    probes = [oom, outside, inside]
    result = Campaign(runner, STRATEGY, settings, probes=lambda: probes).execute()
    assert result.status == FLAKY_BASELINE
    assert result.schedule == inside
    assert result.no_fault_rate == (1, 4)
    assert oom not in [s for s, _ in runner.calls]  # a hard probe never stands for a race


def test_the_first_replay_runs_in_a_fresh_world() -> None:
    """Before a failure is reported, its first replay asks the runner for a fresh World."""
    runner = Scripted(lambda s, n: has_oom(s))
    result = campaign(runner, replays=2)
    fresh = [schedule for schedule, is_fresh in runner.calls if is_fresh]
    assert result.status == FOUND and fresh == [result.schedule]


def test_an_internal_error_stops_the_search_and_is_not_a_finding() -> None:
    """A verdict marked internal ends the campaign as INTERNAL_ERROR, without minimising."""

    def runner(schedule: Schedule, fresh: bool = False) -> tuple[Verdict, None]:
        broken = has_oom(schedule)
        verdict = Verdict(broken, "internal error in chaoslight: x", "failed", internal=broken)
        return verdict, None

    result = Campaign(runner, STRATEGY, Settings(max_examples=50, seed=1, replays=1)).execute()
    assert result.status == INTERNAL_ERROR and not result.minimal


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


def test_minimising_keeps_the_restart_a_failure_needs() -> None:
    """Dropping a redundant fault or shortening a delay keeps the schedule's restarts: a
    failure that shows only in the restarted run still fails, and shrinks."""
    from chaoslight._search._minimize import drop_redundant_faults, shorten_delays

    schedule = Schedule.parse(
        "restarts 1\ndelay@lightning.training_step rank=0 step=1 seconds=3\n"
        "crash@lightning.training_step rank=1 step=2"
    )

    def fails(candidate: Schedule) -> bool:
        return candidate.restarts == 1 and any(f.kind == "crash" for f in candidate)

    dropped = drop_redundant_faults(schedule, fails)
    assert dropped.restarts == 1 and [f.kind for f in dropped] == ["crash"]
    assert shorten_delays(schedule, fails).restarts == 1


def test_progress_names_each_phase_as_the_campaign_enters_it() -> None:
    """The live display says baseline for the two empty runs, then generating, then the
    phases of a failure: never 'baseline' while faults are being tried."""
    runner = Scripted(lambda s, n: has_oom(s))
    seen: list[tuple[str, int]] = []
    Campaign(
        runner,
        STRATEGY,
        Settings(max_examples=200, seed=1, replays=1),
        on_progress=lambda progress: seen.append((progress.phase, progress.examples)),
    ).execute()
    phases = [phase for phase, _ in seen]
    assert seen[:4] == [("baseline", 0), ("baseline", 1), ("baseline", 2), ("generating", 2)]
    assert all(phase != "baseline" for phase, examples in seen if examples > 2)
    assert "shrinking" in phases or "minimising" in phases


def stored(database: str, key: str, *texts: str) -> None:
    """Failures an earlier campaign with ``key`` reported to ``database``."""
    shared = open_database(database, key, lambda line: None)
    for text in texts:
        remember(shared, Schedule.parse(text))


def test_the_result_is_handed_over_before_the_database_records_it(tmp_path: Path) -> None:
    """The failure file (``on_result``) is written first; the database is told after."""
    database = str(tmp_path / "db")
    seen_in_database: list[list[Schedule]] = []

    def on_result(result: Any) -> None:
        seen_in_database.append(known_failures(open_database(database, "k", print)))

    runner = Scripted(lambda s, n: has_oom(s))
    settings = Settings(max_examples=200, seed=1, replays=1, database=database)
    result = Campaign(runner, STRATEGY, settings, key="k", on_result=on_result).execute()
    assert result.status == FOUND and seen_in_database == [[]]
    assert known_failures(open_database(database, "k", print)) == [result.schedule]


def test_max_time_bounds_the_replay_of_the_stored_failures(tmp_path: Path) -> None:
    """Forty stored failures, fixed since, at 50 ms a run: a 0.3 s campaign replays a few
    and stops, instead of spending 2 s replaying them all."""
    database = str(tmp_path / "db")
    stored(database, "k", *(f"oom@lightning.forward rank=0 step={step}" for step in range(40)))

    def slow(schedule: Schedule, n: int) -> bool:
        time.sleep(0.05)
        return False

    runner = Scripted(slow)
    settings = Settings(max_examples=200, seed=1, database=database, max_time=0.3)
    result = Campaign(runner, STRATEGY, settings, key="k").execute()
    replayed = [s for s, _ in runner.calls if s.faults and (s.faults[0].step or 0) >= 4]
    assert result.status == CLEAN and 0 < len(replayed) <= 6, len(replayed)


# Two bugs in two parts of the space: an OOM in the forward of step 0 (shard 0 of 2), and
# an OOM in the backward of step 0 (shard 1 of 2).
REACHED = Reach(
    tuple(
        (site, step) for site in ("lightning.forward", "lightning.backward") for step in range(8)
    ),
    frozenset({"lightning.forward", "lightning.backward"}),
)
BUG_A, BUG_B = ("lightning.forward", 0), ("lightning.backward", 0)


def two_bugs(schedule: Schedule, fresh: bool = False) -> tuple[Verdict, None]:
    """A program that fails one way for bug A and another way for bug B."""
    points = {(f.site, f.step) for f in schedule if f.kind == "oom"}
    if BUG_A in points:
        return Verdict(True, "bug A", "failed"), None
    if BUG_B in points:
        return Verdict(True, "bug B", "hung"), None
    return Verdict(False, "", "passed"), None


def shard_worker(index: int, database: str) -> Any:
    strategy = schedules(world_size=2, faults=["oom"], reach=REACHED.shard(index, 2))
    settings = Settings(
        max_examples=300, seed=index, database=database, replays=1, shard=(index, 2)
    )
    return Campaign(two_bugs, strategy, settings, key="k").execute()


def test_two_shards_on_a_program_with_two_bugs_report_the_two_bugs(tmp_path: Path) -> None:
    """Worker 0/2 finds bug A and stores it; worker 1/2, sharing the database, does not
    replay A (another shard's) and reports B; the next night's worker 0/2 replays its own
    A first and reports it again, still there."""
    assert in_shard(Schedule.parse("oom@lightning.forward step=0"), (0, 2))
    assert in_shard(Schedule.parse("oom@lightning.backward step=0"), (1, 2))
    database = str(tmp_path / "db")
    first, second = shard_worker(0, database), shard_worker(1, database)
    assert (first.status, first.verdict.reason) == (FOUND, "bug A")
    assert (second.status, second.verdict.reason) == (FOUND, "bug B")
    again = shard_worker(0, database)
    assert again.verdict.reason == "bug A" and again.examples < first.examples
