"""Layer 1, schedule data: faults, schedules, their text and JSON forms, validation, errors.

Pure data: nothing here imports torch, Lightning or any other chaoslight layer, so a
schedule can be built, read, written and checked anywhere.
"""

from chaoslight._schedule._budget import DEFAULT_MIN_TRACKED_BYTES, MemoryBudget
from chaoslight._schedule._catalog import (
    COLLECTIVES,
    LIGHTNING_HOOKS,
    LIGHTNING_STEPS,
    LOOP_SITES,
    REDUCTION,
    RESULT,
    SITES,
    SYNC,
    SiteInfo,
)
from chaoslight._schedule._clip import clip
from chaoslight._schedule._data_faults import BadCheckpoint, DropBatch, Flip, RepeatBatch
from chaoslight._schedule._errors import (
    ChaosError,
    CheckFailed,
    InjectionActive,
    InvalidArgument,
    InvalidSchedule,
    suggest,
)
from chaoslight._schedule._faults import (
    DRAWN_ORDERS,
    FAULT_KINDS,
    OFF_COLLECTIVES,
    OOM,
    REORDER_ORDERS,
    SIMULATED_OOM_MARK,
    Allocate,
    Corrupt,
    Crash,
    Delay,
    DropSync,
    Fault,
    Freeze,
    PgAbort,
    Preempt,
    Raise,
    ReorderReduction,
    Severity,
    fault_kind,
    permutation,
)
from chaoslight._schedule._model import Schedule
from chaoslight._schedule._textform import fault_from_text, make_fault
from chaoslight._schedule._vocabulary import Vocabulary

__all__ = [
    "COLLECTIVES",
    "DEFAULT_MIN_TRACKED_BYTES",
    "DRAWN_ORDERS",
    "FAULT_KINDS",
    "LIGHTNING_HOOKS",
    "LIGHTNING_STEPS",
    "LOOP_SITES",
    "OFF_COLLECTIVES",
    "OOM",
    "REDUCTION",
    "REORDER_ORDERS",
    "RESULT",
    "SIMULATED_OOM_MARK",
    "SITES",
    "SYNC",
    "Allocate",
    "BadCheckpoint",
    "ChaosError",
    "CheckFailed",
    "Corrupt",
    "Crash",
    "Delay",
    "DropBatch",
    "DropSync",
    "Fault",
    "Flip",
    "Freeze",
    "InjectionActive",
    "InvalidArgument",
    "InvalidSchedule",
    "MemoryBudget",
    "PgAbort",
    "Preempt",
    "Raise",
    "ReorderReduction",
    "RepeatBatch",
    "Schedule",
    "Severity",
    "SiteInfo",
    "Vocabulary",
    "clip",
    "fault_from_text",
    "fault_kind",
    "make_fault",
    "permutation",
    "suggest",
]
