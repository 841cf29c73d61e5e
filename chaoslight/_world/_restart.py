"""Restarts: after a run that did not pass, the job runs again in the same directory.

A cluster requeues a job that crashed, was killed or was preempted, and the job resumes
from what it left on disk. ``Schedule(restarts=N)`` asks for that: the World runs the
target again, in the working directory the last run used, at most N times, until a run
passes without being preempted (a preempted job is requeued even when it stopped
cleanly). Each fault fires in the first run that reaches its trigger, as often as its
``times`` says over all runs together: the restarted job does not crash again at the
step it crashed at (it would never finish), but a second crash at a later step makes a
second crash-and-restart cycle.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from chaoslight._report import PASSED, Outcome
from chaoslight._runtime._events import FIRED, NOTE
from chaoslight._runtime._preempt import DELIVERED
from chaoslight._schedule import Fault, Schedule
from chaoslight._sites._damage import holding

RunOne = Callable[[Schedule, Path], Outcome]


def run_with_restarts(run_one: RunOne, plan: Schedule, scratch: Path, size: int) -> Outcome:
    """Run ``plan`` and its restarts in one fresh directory under ``scratch``; the last
    run's outcome, with the earlier runs in ``attempts`` and ``plan`` as its schedule."""
    workdir = Path(tempfile.mkdtemp(prefix="restarts-", dir=scratch))
    try:
        # A file a fault damaged stays damaged for the restarts (a truncated checkpoint is
        # what a restart must cope with) and goes back after the last run.
        with holding(scratch):
            return replace(_runs(run_one, plan, workdir, size), schedule=plan)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _runs(run_one: RunOne, plan: Schedule, workdir: Path, size: int) -> Outcome:
    attempts: list[Outcome] = []
    schedule = Schedule(plan.faults, memory_budget=plan.memory_budget)
    for attempt in range(plan.restarts + 1):
        outcome = run_one(schedule, workdir)
        if (outcome.status == PASSED and not preempted(outcome)) or attempt == plan.restarts:
            break
        attempts.append(outcome)
        schedule = remaining(schedule, outcome, size)
    return replace(outcome, attempts=tuple(attempts))


def preempted(outcome: Outcome) -> bool:
    """A SIGTERM reached a rank: the scheduler requeues the job however it ended."""
    return any(e.kind == NOTE and e.detail.startswith(DELIVERED) for e in outcome.events)


def remaining(schedule: Schedule, outcome: Outcome, size: int) -> Schedule:
    """What is left of ``schedule`` after ``outcome``: each fault's firings per rank are
    spent; a fault for every rank that fired on some ranks only goes on for the others."""
    fired = Counter((e.rank, e.fault) for e in outcome.events if e.kind == FIRED)
    left: list[Fault] = []
    for fault in schedule.faults:
        ranks = [fault.rank] if fault.rank is not None else list(range(size))
        used = {rank: fired[(rank, str(fault))] for rank in ranks}
        if fault.times is None or not any(used.values()):
            left.append(fault)
            continue
        for rank in ranks:
            if fault.times - used[rank] > 0:
                left.append(replace(fault, rank=rank, times=fault.times - used[rank]))
    return Schedule(left, memory_budget=schedule.memory_budget)
