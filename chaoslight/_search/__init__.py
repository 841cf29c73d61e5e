"""Layer 8, the search: run Hypothesis-generated schedules on a World, judge each run by
the fault-aware oracle, shrink and replay failures, write failure files.

``fuzz`` is the default search; ``baseline`` runs a target once with no fault (what a
user wants to know before searching); ``replay`` runs a failure file again.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

from chaoslight._runtime._resolve import check_runnable
from chaoslight._schedule import InvalidArgument, Schedule
from chaoslight._search._campaign import Campaign, Progress, Result
from chaoslight._search._coverage import coverage
from chaoslight._search._failure import DEFAULT_CHECKS, Failure, check_specs
from chaoslight._search._job import Job, Quiet, make_job
from chaoslight._search._kinds import DEFAULT_KINDS
from chaoslight._search._reach import Reach
from chaoslight._search._schedule_strategies import schedules
from chaoslight._search._settings import DEFAULT_TIMEOUT_S, Settings, with_keywords
from chaoslight._verdict._oracle import Verdict, judge
from chaoslight._world import Outcome, World

__all__ = [
    "DEFAULT_CHECKS",
    "DEFAULT_TIMEOUT_S",
    "Campaign",
    "Failure",
    "Progress",
    "Result",
    "Settings",
    "Verdict",
    "baseline",
    "fuzz",
    "judge",
    "replay",
]


def fuzz(
    target: str,
    settings: Settings | None = None,
    *,
    display: Any = None,
    world: World | None = None,
    on_failure: Callable[[Failure], None] | None = None,
    **keywords: Any,
) -> tuple[Result, Failure | None]:
    """Search schedules that make ``target`` fail, as ``settings`` say (``Settings``).

    ``fuzz(target, Settings(max_examples=50))`` and ``fuzz(target, max_examples=50)`` are
    the same search: keywords name settings, and one given beside a settings object wins.
    With no settings but the target it does the right thing: every fault kind a correct
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
    chosen = with_keywords(settings, keywords, "fuzz")
    job = make_job(target, chosen)
    size = chosen.world_size
    if world is not None and world.size != size:
        raise InvalidArgument(f"world=World(size={world.size}) is not world_size={size}")

    def space() -> Reach | None:
        """The reached points this campaign searches (after the baseline recorded them)."""
        if job.reach is None:
            return None
        reach = job.reach.restricted(chosen.sites) if chosen.sites else job.reach.focused()
        return reach.shard(*chosen.shard) if chosen.shard is not None else reach

    def probes() -> list[Schedule]:
        reach = space()
        kinds = DEFAULT_KINDS if chosen.faults is None else chosen.faults
        return reach.probes(size, kinds) if reach is not None else []

    def strategy() -> Any:
        return schedules(
            world_size=size,
            steps=chosen.steps,
            sites=chosen.sites,
            faults=chosen.faults,
            max_faults=chosen.max_faults,
            reach=space(),
        )

    def report(found: Result) -> None:
        failure = _failure(job, found)
        if failure is not None and on_failure is not None:
            on_failure(failure)

    key = f"{target}|{size}|{sorted(c.name for c in job.checks)}"
    with job.runner(world) as run, display or Quiet() as shown:
        campaign = Campaign(
            run,
            strategy,
            chosen,
            key=key,
            probes=probes,
            on_progress=shown.update,
            on_result=report,
            on_warning=getattr(shown, "warn", None),
        )
        result = campaign.execute()
    result.coverage = coverage(job.reach, result.tried, job.checks)
    return result, _failure(job, result)


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


def baseline(
    target: str, settings: Settings | None = None, **keywords: Any
) -> tuple[Verdict, Outcome]:
    """Run ``target`` once with no fault (the baseline) and the default checks: does it
    work at all? (``chaoslight check`` on the command line.)
    Of ``settings`` (or keywords naming them) it uses ``world_size``, ``checks`` and
    ``timeout``."""
    job = make_job(target, with_keywords(settings, keywords, "baseline"))
    with World(size=job.world_size) as world:
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
    size = failure.world_size if world_size is None else world_size
    settings = Settings(world_size=size, timeout=timeout or failure.timeout, checks=checks)
    job = make_job(target or failure.target, settings)
    if world is not None and world.size != job.world_size:
        raise InvalidArgument(f"world=World(size={world.size}) is not world_size={job.world_size}")
    check_runnable(failure.schedule, job.world_size)
    with World(size=job.world_size) if world is None else nullcontext(world) as running:
        return job.run(running, failure.schedule, trace=trace)
