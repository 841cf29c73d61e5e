"""Hypothesis strategies for chaoslight schedules (``chaoslight.strategies``).

    from chaoslight.strategies import schedules

    @given(schedule=schedules(world_size=2, steps=4))
    def test_survives(chaos_world, schedule): ...

Every strategy validates its arguments when it is built (``world_size=0 must be at
least 1``) and its docstring says how it shrinks: towards fewer faults, lower ranks,
earlier steps, smaller delays and allocations, and the simpler kind.
"""

from chaoslight._search._kinds import DEFAULT_KINDS, IN_PROCESS_KINDS, KINDS
from chaoslight._search._schedule_strategies import one_fault, schedules
from chaoslight._search._strategies import (
    allocations,
    corruptions,
    crashes,
    delays,
    dropped_syncs,
    ooms,
    raises,
    reorders,
)

__all__ = [
    "DEFAULT_KINDS",
    "IN_PROCESS_KINDS",
    "KINDS",
    "allocations",
    "corruptions",
    "crashes",
    "delays",
    "dropped_syncs",
    "one_fault",
    "ooms",
    "raises",
    "reorders",
    "schedules",
]
