"""Layer 1, schedule data: faults, schedules, their text and JSON forms, validation, errors.

Pure data: nothing here imports torch, Lightning or any other chaoslight layer, so a
schedule can be built, read, written and checked anywhere.
"""

from chaoslight._schedule._budget import DEFAULT_MIN_TRACKED_BYTES, MemoryBudget
from chaoslight._schedule._catalog import (
    COLLECTIVES,
    LIGHTNING_HOOKS,
    LIGHTNING_STEPS,
    REDUCTION,
    RESULT,
    SITES,
    SYNC,
    SiteInfo,
)
from chaoslight._schedule._errors import (
    ChaosError,
    CheckFailed,
    InjectionActive,
    InvalidArgument,
    InvalidSchedule,
    suggest,
)
from chaoslight._schedule._faults import (
    FAULT_KINDS,
    OOM,
    Allocate,
    Corrupt,
    Crash,
    Delay,
    DropSync,
    Fault,
    Preempt,
    Raise,
    ReorderReduction,
    permutation,
)
from chaoslight._schedule._model import Schedule
from chaoslight._schedule._textform import fault_from_text, make_fault

__all__ = [
    "COLLECTIVES",
    "DEFAULT_MIN_TRACKED_BYTES",
    "FAULT_KINDS",
    "LIGHTNING_HOOKS",
    "LIGHTNING_STEPS",
    "OOM",
    "REDUCTION",
    "RESULT",
    "SITES",
    "SYNC",
    "Allocate",
    "ChaosError",
    "CheckFailed",
    "Corrupt",
    "Crash",
    "Delay",
    "DropSync",
    "Fault",
    "InjectionActive",
    "InvalidArgument",
    "InvalidSchedule",
    "MemoryBudget",
    "Preempt",
    "Raise",
    "ReorderReduction",
    "Schedule",
    "SiteInfo",
    "fault_from_text",
    "make_fault",
    "permutation",
    "suggest",
]
