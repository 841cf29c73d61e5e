"""Layer 3, runtime: the engine that fires faults, ``inject``, the rank/step context,
the memory ledger, the event log, the watchdog, ``ChaosCallback`` and the autostart hook.

Imports the schedule data and the sites, nothing above. ``ChaosCallback`` is not
re-exported here: defining it imports Lightning (see ``chaoslight.__getattr__``).
"""

from chaoslight._runtime._context import current_rank, step_of
from chaoslight._runtime._events import (
    FIRED,
    FREED,
    NEVER_FIRED,
    NOTE,
    SURFACED,
    Event,
    Fired,
    FiredFaults,
    budget_of,
    parse_fired,
    read_fault,
)
from chaoslight._runtime._evidence import OBSERVATION, Evidence, RankView, Violation
from chaoslight._runtime._inject import (
    Injection,
    Run,
    ScheduleLike,
    active,
    as_schedule,
    inject,
    mark_step,
)
from chaoslight._runtime._protocol import CHECK_FACTORIES, as_checks, check_from_name
from chaoslight._runtime._stacks import PROGRESS_SITES, HangReport, Position
from chaoslight._runtime._watchdog import HangDetected, Watchdog

__all__ = [
    "CHECK_FACTORIES",
    "FIRED",
    "FREED",
    "NEVER_FIRED",
    "NOTE",
    "OBSERVATION",
    "PROGRESS_SITES",
    "SURFACED",
    "Event",
    "Evidence",
    "Fired",
    "FiredFaults",
    "HangDetected",
    "HangReport",
    "Injection",
    "Position",
    "RankView",
    "Run",
    "ScheduleLike",
    "Violation",
    "Watchdog",
    "active",
    "as_checks",
    "as_schedule",
    "budget_of",
    "check_from_name",
    "current_rank",
    "inject",
    "mark_step",
    "parse_fired",
    "read_fault",
    "step_of",
]
