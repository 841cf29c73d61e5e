"""A last deletion pass after Hypothesis has shrunk a failing schedule.

Hypothesis's shrinker sometimes stops at a local minimum with a redundant fault left in
(seen: ``[delay, crash]`` when ``[crash]`` alone fails). Removing faults one at a time,
until no single removal still fails, makes the reported schedule 1-minimal: every fault
in it is needed. Each try is one run, so this costs at most n(n+1)/2 runs for n faults.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from chaoslight._schedule import Delay, Schedule

# Seconds a delay may shrink to, smallest first (the strategies draw from the same grid).
DELAY_GRID = (0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 3.0)


def drop_redundant_faults(schedule: Schedule, fails: Callable[[Schedule], bool]) -> Schedule:
    """The schedule without every fault whose removal still ``fails``; order is kept."""
    current = schedule
    changed = True
    while changed and len(current) > 1:
        changed = False
        for index in reversed(range(len(current))):
            smaller = Schedule(
                current.faults[:index] + current.faults[index + 1 :],
                memory_budget=current.memory_budget,
                restarts=current.restarts,  # a failure may need its restart
            )
            if fails(smaller):
                current, changed = smaller, True
                break
    return current


def gentlest(schedule: Schedule, fails: Callable[[Schedule], bool]) -> Schedule:
    """Each fault replaced by its gentler kin (``Fault.gentler``: a freeze by a straggler
    as long) wherever the schedule still ``fails``: the report names the mildest cause."""
    current = schedule
    for index, fault in enumerate(current.faults):
        milder = fault.gentler()
        if milder is None:
            continue
        faults = (*current.faults[:index], milder, *current.faults[index + 1 :])
        candidate = Schedule(faults, memory_budget=current.memory_budget, restarts=current.restarts)
        if fails(candidate):
            current = candidate
    return current


def shorten_delays(
    schedule: Schedule, fails: Callable[[Schedule], bool], grid: Sequence[float] = DELAY_GRID
) -> Schedule:
    """Each delay shortened to one grid point above the smallest that still ``fails``.

    A probe's one-second straggler becomes the 0.3 s that is clearly enough: the smallest
    failing point sits near the threshold, where a replay may pass; the next one up is a
    clear step past it, so the report says how large a delay the bug needs and replays.
    """
    current = schedule
    for index, fault in enumerate(current.faults):
        if not isinstance(fault, Delay):
            continue
        shorter = [g for g in grid if g < fault.seconds]
        for position, seconds in enumerate(shorter):
            smallest = _with_delay(current, index, replace(fault, seconds=seconds))
            if not fails(smallest):
                continue
            if position + 1 < len(shorter):  # else the step up is the delay it had already
                step_up = _with_delay(current, index, replace(fault, seconds=shorter[position + 1]))
                current = step_up if fails(step_up) else smallest
            break
    return current


def _with_delay(schedule: Schedule, index: int, fault: Delay) -> Schedule:
    faults = (*schedule.faults[:index], fault, *schedule.faults[index + 1 :])
    return Schedule(faults, memory_budget=schedule.memory_budget, restarts=schedule.restarts)
