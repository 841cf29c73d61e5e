"""Layer 7, the search: run Hypothesis-generated schedules on a World, judge each run by
the fault-aware oracle, shrink and replay failures, write failure files.

``fuzz`` is the default search; ``check`` runs a target once with no fault (what a user
wants to know before searching); ``replay`` runs a failure file again.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

from chaoslight._runtime._resolve import check_runnable
from chaoslight._schedule import InvalidArgument, Schedule
from chaoslight._schedule._validate import (
    MAX_EXAMPLES,
    MAX_FAULTS,
    MAX_REPLAYS,
    MAX_STEPS,
    check_bool,
    check_bounded_int,
    check_seconds,
)
from chaoslight._search._campaign import Campaign, Progress, Result
from chaoslight._search._coverage import coverage
from chaoslight._search._database import check_database
from chaoslight._search._failure import DEFAULT_CHECKS, Failure, check_specs
from chaoslight._search._job import Job, Quiet, make_job
from chaoslight._search._oracle import Verdict, judge
from chaoslight._search._reach import Reach
from chaoslight._search._strategies import DEFAULT_KINDS, schedules
from chaoslight._world import Outcome, World

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
    max_time: float | None = None,
    seed: int | None = None,
    timeout: float = 20.0,
    replays: int = 3,
    database: str | None = None,
    shard: tuple[int, int] | None = None,
    display: Any = None,
    world: World | None = None,
    strict: bool = False,
    on_failure: Callable[[Failure], None] | None = None,
) -> tuple[Result, Failure | None]:
    """Search schedules that make ``target`` fail on a World of ``world_size`` ranks.

    With no arguments but the target it does the right thing: every fault kind a correct
    program can meet in production, drawn only at the (site, step) points the fault-free
    baseline run reached (over the whole run, weighted to the user's own hooks), the
    default checks, each run judged by the oracle. ``faults``/``sites``/``checks`` narrow
    or widen it; ``steps`` bounds the steps only when a run records no reach.
    ``max_time`` bounds the whole campaign in seconds (stored failures, search, replays);
    ``shard=(i, n)`` searches the i-th of n disjoint parts of the reached points, and
    replays only the ``database``'s failures in that part, for workers sharing it.
    ``world`` runs the search on a World you already have (its size must be
    ``world_size``); replays that need a fresh World start their own.
    A failure Lightning itself causes (``_known.KNOWN_ISSUES``) goes to ``result.known``,
    once per issue, and the search goes on; ``strict=True`` makes it a failure.
    ``on_failure`` is called with the failure as soon as it is confirmed, before the
    ``database`` records it (the CLI writes the failure file there); a database that
    fails is one warning (``display.warn``, else a ``RuntimeWarning``), never an error.
    Returns the campaign's result and, when it found something, the failure to replay.
    """
    job = make_job(target, world_size, timeout, checks)
    _check_budget(max_examples, replays, steps, max_faults, max_time)
    check_bool("strict", strict)
    check_database("database", database)
    if shard is not None:
        Reach().shard(*shard)  # a shard out of range is a usage error before any World starts
    if world is not None and world.size != world_size:
        raise InvalidArgument(f"world=World(size={world.size}) is not world_size={world_size}")

    # Built now to check the arguments before any World starts; again after the baseline,
    # from the reach it recorded.
    schedules(world_size=world_size, steps=steps, sites=sites, faults=faults, max_faults=max_faults)

    def space() -> Reach | None:
        """The reached points this campaign searches (after the baseline recorded them)."""
        if job.reach is None:
            return None
        reach = job.reach.restricted(sites) if sites else job.reach.focused()
        return reach.shard(*shard) if shard is not None else reach

    def probes() -> list[Schedule]:
        reach = space()
        kinds = DEFAULT_KINDS if faults is None else faults
        return reach.probes(world_size, kinds) if reach is not None else []

    def strategy() -> Any:
        reach = space()
        return schedules(
            world_size=world_size,
            steps=steps,
            sites=sites,
            faults=faults,
            max_faults=max_faults,
            reach=reach,
        )

    def report(found: Result) -> None:
        failure = _failure(job, found)
        if failure is not None and on_failure is not None:
            on_failure(failure)

    key = f"{target}|{world_size}|{sorted(c.name for c in job.checks)}"
    with job.runner(world) as run, display or Quiet() as shown:
        campaign = Campaign(run, strategy, max_examples, seed, database, key, replays)
        campaign.on_progress, campaign.max_time, campaign.probes = shown.update, max_time, probes
        campaign.strict, campaign.shard = strict, shard
        campaign.on_warning = getattr(shown, "warn", campaign.on_warning)
        campaign.on_result = report
        result = campaign.execute()
    result.coverage = coverage(job.reach, result.tried)
    return result, _failure(job, result)


def _check_budget(
    max_examples: int, replays: int, steps: int, max_faults: int, max_time: float | None
) -> None:
    check_bounded_int("max_examples", max_examples, 1, MAX_EXAMPLES)
    check_bounded_int("replays", replays, 0, MAX_REPLAYS)
    check_bounded_int("steps", steps, 1, MAX_STEPS)
    check_bounded_int("max_faults", max_faults, 1, MAX_FAULTS)
    if max_time is not None:
        check_seconds("max_time", max_time)


def _failure(job: Job, result: Result) -> Failure | None:
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
    job = make_job(target, world_size, timeout, checks)
    with World(size=world_size) as world:
        return job.run(world, Schedule())


def replay(
    failure: Failure,
    *,
    target: str | None = None,
    world_size: int | None = None,
    timeout: float | None = None,
    checks: Sequence[Any] | None = None,
    user_checks: Sequence[Any] = (),
    trace: bool = False,
    world: World | None = None,
) -> tuple[Verdict, Outcome]:
    """Run a failure's schedule once more, in a fresh World (or ``world``), judged as the
    search judged it; ``trace=True`` records every site call, for ``outcome.to_html()``.

    ``checks`` replaces the failure's checks. A failure names a user check by import path,
    and a file is data: that check is judged only when ``user_checks`` holds its class (built
    with the file's parameters) or an object of it; else a warning says it was skipped.
    Every exception class and allocation of the schedule is checked here, before a World."""
    if checks is None:
        checks, skipped = failure.resolve_checks(user_checks)
        for line in skipped:
            warnings.warn(f"chaoslight replay: {line}", UserWarning, stacklevel=2)
    job = make_job(
        target or failure.target,
        failure.world_size if world_size is None else world_size,
        timeout or failure.timeout,
        checks,
    )
    if world is not None and world.size != job.world_size:
        raise InvalidArgument(f"world=World(size={world.size}) is not world_size={job.world_size}")
    check_runnable(failure.schedule, job.world_size)
    with World(size=job.world_size) if world is None else nullcontext(world) as running:
        return job.run(running, failure.schedule, trace=trace)
