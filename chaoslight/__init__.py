"""chaoslight: deterministic, replayable fault injection for PyTorch Lightning training.

    schedule = chaoslight.Schedule([chaoslight.OOM(site="lightning.training_step", rank=1, step=3)])
    with chaoslight.inject(schedule) as run:
        trainer.fit(model)
    print(run.report())

Building and reading schedules needs no torch import; torch and Lightning are imported
when a schedule is injected.
"""

from __future__ import annotations

from typing import Any

from chaoslight._catalog import SITES
from chaoslight._errors import (
    ChaosError,
    CheckFailed,
    InjectionActive,
    InvalidArgument,
    InvalidSchedule,
)
from chaoslight._events import Event
from chaoslight._faults import (
    FAULT_KINDS,
    OOM,
    Allocate,
    Corrupt,
    Crash,
    Delay,
    DropSync,
    Fault,
    Raise,
    ReorderReduction,
)
from chaoslight._runtime import Injection, Run, inject
from chaoslight._schedule import MemoryBudget, Schedule
from chaoslight._world import Outcome, Watchdog, World

__version__ = "0.1.0"

__all__ = [
    "OOM",
    "Allocate",
    "ChaosCallback",
    "ChaosError",
    "CheckFailed",
    "Corrupt",
    "Crash",
    "Delay",
    "DropSync",
    "Event",
    "Fault",
    "Injection",
    "InjectionActive",
    "InvalidArgument",
    "InvalidSchedule",
    "MemoryBudget",
    "Outcome",
    "Raise",
    "ReorderReduction",
    "Run",
    "Schedule",
    "Watchdog",
    "World",
    "checks",
    "faults",
    "inject",
    "sites",
]


def sites() -> dict[str, str]:
    """Every injection site, name to one-line description."""
    return {name: info.description for name, info in SITES.items()}


def faults() -> dict[str, str]:
    """Every fault kind, text-form name to one-line description."""
    return {kind: (cls.__doc__ or "").strip().splitlines()[0] for kind, cls in FAULT_KINDS.items()}


def __getattr__(name: str) -> Any:
    # ChaosCallback subclasses Lightning's Callback, so importing it imports Lightning.
    if name == "checks":
        import chaoslight.checks

        return chaoslight.checks
    if name == "ChaosCallback":
        from chaoslight._callback import ChaosCallback

        return ChaosCallback
    raise AttributeError(f"module 'chaoslight' has no attribute {name!r}")
