"""Layer 6, the search: run Hypothesis-generated schedules on a World, judge each run by
the fault-aware oracle, shrink and replay failures, write failure files.

``fuzz`` is the default search; ``check`` runs a target once with no fault (what a user
wants to know before searching); ``replay`` runs a failure file again.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from chaoslight._runtime import as_checks
from chaoslight._schedule import InvalidArgument, Schedule
from chaoslight._schedule._validate import (
    MAX_EXAMPLES,
    MAX_FAULTS,
    MAX_REPLAYS,
    MAX_STEPS,
    check_bounded_int,
    check_seconds,
    check_world_size,
)
from chaoslight._search._campaign import Campaign, Progress, Result
from chaoslight._search._failure import DEFAULT_CHECKS, Failure, check_specs
from chaoslight._search._oracle import Verdict, judge
from chaoslight._search._strategies import schedules
from chaoslight._world import Outcome, World
from chaoslight._world._target import parse_target

__all__ = [
    "DEFAULT_CHECKS",
    "Campaign",
    "Failure",
    "Progress",
    "Result",
    "Verdict",
    "check",
    "fuzz",
    "judge",
    "replay",
]


class _Quiet:
    """The progress display of a campaign run from Python: shows nothing."""

    def __enter__(self) -> _Quiet:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, progress: Any) -> None:
        return None


@dataclass(frozen=True)
class _Job:
    """What every run of one campaign shares: the target, the World's size, the checks."""

    target: str
    world_size: int
    timeout: float
    checks: tuple[Any, ...]

    def run(self, world: World, schedule: Schedule) -> tuple[Verdict, Outcome]:
        outcome = world.run(self.target, schedule, timeout=self.timeout, checks=self.checks)
        return judge(outcome), outcome

    @contextmanager
    def runner(self, world: World | None = None) -> Iterator[Any]:
        """A Campaign runner on one warm World (``world``, or one started here and closed
        after); ``fresh=True`` runs in a new World, with new processes and directories."""
        started: Any = World(size=self.world_size) if world is None else nullcontext(world)
        with started as warm:

            def run(schedule: Schedule, fresh: bool = False) -> tuple[Verdict, Outcome]:
                if not fresh:
                    return self.run(warm, schedule)
                with World(size=self.world_size) as new:
                    return self.run(new, schedule)

            yield run


def _job(target: str, world_size: int, timeout: float, checks: Sequence[Any] | None) -> _Job:
    parse_target(target)
    check_world_size("world_size", world_size)
    named = DEFAULT_CHECKS if checks is None else checks
    return _Job(target, world_size, check_seconds("timeout", timeout), tuple(as_checks(named)))


def fuzz(
    target: str,
    *,
    world_size: int = 2,
    checks: Sequence[Any] | None = None,
    faults: Sequence[str] | None = None,
    sites: Sequence[str] | None = None,
    steps: int = 4,
    max_faults: int = 3,
    max_examples: int = 100,
    seed: int | None = None,
    timeout: float = 20.0,
    replays: int = 3,
    database: str | None = None,
    display: Any = None,
    world: World | None = None,
) -> tuple[Result, Failure | None]:
    """Search schedules that make ``target`` fail on a World of ``world_size`` ranks.

    With no arguments but the target it does the right thing: every fault kind a correct
    program can meet in production, the default checks, each run judged by the oracle.
    ``faults``/``sites``/``checks`` narrow or widen it. ``world`` runs the search on a
    World you already have (its size must be ``world_size``); replays that need a fresh
    World start their own. Returns the campaign's result and, when it found something,
    the failure to save and replay.
    """
    job = _job(target, world_size, timeout, checks)
    check_bounded_int("max_examples", max_examples, 1, MAX_EXAMPLES)
    check_bounded_int("replays", replays, 0, MAX_REPLAYS)
    check_bounded_int("steps", steps, 1, MAX_STEPS)
    check_bounded_int("max_faults", max_faults, 1, MAX_FAULTS)
    strategy = schedules(
        world_size=world_size, steps=steps, sites=sites, faults=faults, max_faults=max_faults
    )
    key = f"{target}|{world_size}|{sorted(c.name for c in job.checks)}"
    if world is not None and world.size != world_size:
        raise InvalidArgument(f"world=World(size={world.size}) is not world_size={world_size}")
    with job.runner(world) as run, display or _Quiet() as shown:
        result = Campaign(
            run, strategy, max_examples, seed, database, key, replays, on_progress=shown.update
        ).execute()
    return result, _failure(job, result)


def _failure(job: _Job, result: Result) -> Failure | None:
    if result.schedule is None or result.verdict is None:
        return None
    return Failure(
        result.schedule,
        job.target,
        job.world_size,
        job.timeout,
        check_specs(job.checks),
        reason=result.verdict.reason,
        status=result.status,
    )


def check(
    target: str,
    *,
    world_size: int = 2,
    checks: Sequence[Any] | None = None,
    timeout: float = 20.0,
) -> tuple[Verdict, Outcome]:
    """Run ``target`` once with no fault and the default checks: does it work at all?"""
    job = _job(target, world_size, timeout, checks)
    with World(size=world_size) as world:
        return job.run(world, Schedule())


def replay(
    failure: Failure,
    *,
    target: str | None = None,
    world_size: int | None = None,
    timeout: float | None = None,
    checks: Sequence[Any] | None = None,
) -> tuple[Verdict, Outcome]:
    """Run a failure's schedule once more, in a fresh World, judged as the search judged it."""
    job = _job(
        target or failure.target,
        failure.world_size if world_size is None else world_size,
        timeout or failure.timeout,
        failure.build_checks() if checks is None else checks,
    )
    with World(size=job.world_size) as world:
        return job.run(world, failure.schedule)
