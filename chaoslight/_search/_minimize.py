"""A last deletion pass after Hypothesis has shrunk a failing schedule.

Hypothesis's shrinker sometimes stops at a local minimum with a redundant fault left in
(seen: ``[delay, crash]`` when ``[crash]`` alone fails). Removing faults one at a time,
until no single removal still fails, makes the reported schedule 1-minimal: every fault
in it is needed. Each try is one run, so this costs at most n(n+1)/2 runs for n faults.
"""

from __future__ import annotations

from collections.abc import Callable

from chaoslight._schedule._model import Schedule


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
            )
            if fails(smaller):
                current, changed = smaller, True
                break
    return current
