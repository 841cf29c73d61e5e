"""Restarts: after a run that did not pass, the job runs again in the same directory.

A cluster requeues a job that crashed, was killed or was preempted, and the job resumes
from what it left on disk. ``Schedule(restarts=N)`` asks for that: the World runs the
target again, in the working directory the last run used, at most N times, until a run
passes without being preempted (a preempted job is requeued even when it stopped
cleanly). Each fault fires in the first run that reaches its trigger, as often as its
``times`` says over all runs together: the restarted job does not crash again at the
step it crashed at (it would never finish), but a second crash at a later step makes a
second crash-and-restart cycle.

A fault bound to a run (``run=2``) fires in that run only, and one bound to every run
(``run="every"``) in each, its ``times`` counted per run: "fails again while resuming".
A rank's engine knows nothing of runs (``inject()`` is one run), so each run is handed
its faults unbound, and its events are given back their bound text, which the report
and the oracle print.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from chaoslight._report import PASSED, Outcome
from chaoslight._runtime._events import FIRED, NEVER_FIRED, NOTE, Event
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
    unbound = Schedule([f for f in plan.faults if f.run is None], memory_budget=plan.memory_budget)
    for number in range(1, plan.restarts + 2):
        schedule, texts = for_run(plan, unbound, number)
        outcome = rebound(run_one(schedule, workdir), texts, plan, unbound)
        if (outcome.status == PASSED and not preempted(outcome)) or number > plan.restarts:
            break
        attempts.append(outcome)
        unbound = remaining(unbound, outcome, size)
    outcome = replace(outcome, attempts=tuple(attempts))
    return replace(outcome, events=[*outcome.events, *_bound_notes(plan, outcome)])


def for_run(plan: Schedule, unbound: Schedule, number: int) -> tuple[Schedule, dict[str, str]]:
    """What run ``number`` is handed: what is left of the unbound faults, and the faults
    bound to this run (or to every run, with all their ``times``) unbound; and the bound
    text of each, by its unbound text. A bound fault whose unbound text is an unbound
    fault's own keeps no mapping: their events cannot be told apart."""
    bound = [f for f in plan.faults if f.run is not None and f.fires_in(number)]
    loose = [replace(f, run=None) for f in bound]
    taken = {str(f) for f in unbound.faults}
    texts = {
        str(free): str(f) for f, free in zip(bound, loose, strict=True) if str(free) not in taken
    }
    schedule = Schedule([*unbound.faults, *loose], memory_budget=plan.memory_budget)
    return schedule, texts


def rebound(outcome: Outcome, texts: dict[str, str], plan: Schedule, unbound: Schedule) -> Outcome:
    """``outcome`` with its events naming each bound fault by its bound text (``run=2``),
    and as its schedule the faults it was handed, so written."""
    if not texts:
        return outcome
    events = [replace(e, fault=texts.get(e.fault, e.fault)) for e in outcome.events]
    bound = [f for f in plan.faults if str(f) in texts.values()]
    handed = Schedule(
        [*unbound.faults, *bound], memory_budget=plan.memory_budget, restarts=plan.restarts
    )
    return replace(outcome, events=events, schedule=handed)


def _bound_notes(plan: Schedule, last: Outcome) -> list[Event]:
    """For each fault bound to a run that never fired, why, in the last run's events
    (which the verdict's notes read): its run came but did not reach it (the notes that
    run's ranks left), or its run never came (the job passed before)."""
    runs = [*last.attempts, last]
    notes: list[Event] = []
    for fault in plan.faults:
        if not isinstance(fault.run, int) or fault.run == len(runs):
            continue  # unbound, every run's (the last run's notes say), or the last run's
        text = str(fault)
        if fault.run < len(runs):
            notes += [
                e for e in runs[fault.run - 1].events if e.kind == NEVER_FIRED and e.fault == text
            ]
            continue
        why = f"run {fault.run} never came: the job passed in run {len(runs)}, no restart followed"
        now = time.monotonic(), time.time()
        notes.append(Event(NEVER_FIRED, fault.site, fault.rank or 0, None, *now, text, detail=why))
    return notes


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
