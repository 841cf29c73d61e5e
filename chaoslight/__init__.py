"""chaoslight: deterministic, replayable fault injection for PyTorch Lightning training.

    schedule = chaoslight.Schedule([chaoslight.OOM(site="lightning.training_step", rank=1, step=3)])
    with chaoslight.inject(schedule) as run:
        trainer.fit(model)
    print(run.report())

Building and reading schedules needs no torch import; torch and Lightning are imported
when a schedule is injected. The layers behind this facade, and what each may import,
are described in ``ARCHITECTURE.md``.
"""

import typing as _typing

# strategies/ installs as chaoslight.strategies (setup.py): imported by its full name, which
# mypy, reading the source tree where it sits apart, treats as an installed module.
import chaoslight.strategies as strategies
from chaoslight import checks
from chaoslight._report import Outcome
from chaoslight._runtime import Event, HangDetected, Injection, Run, Watchdog, inject, mark_step
from chaoslight._schedule import (
    OOM,
    Allocate,
    BadCheckpoint,
    ChaosError,
    CheckFailed,
    Corrupt,
    Crash,
    Delay,
    DropBatch,
    DropSync,
    Fault,
    Flip,
    Freeze,
    InjectionActive,
    InvalidArgument,
    InvalidSchedule,
    MemoryBudget,
    PgAbort,
    Preempt,
    Raise,
    ReorderReduction,
    RepeatBatch,
    Schedule,
)
from chaoslight._schedule._describe import fault_descriptions as _fault_descriptions
from chaoslight._schedule._describe import site_descriptions as _site_descriptions
from chaoslight._search import Failure, Settings, Verdict, baseline, fuzz, judge, replay
from chaoslight._world import World

__version__ = "0.1.0"

__all__ = [
    "OOM",
    "Allocate",
    "BadCheckpoint",
    "ChaosCallback",
    "ChaosError",
    "CheckFailed",
    "Corrupt",
    "Crash",
    "Delay",
    "DropBatch",
    "DropSync",
    "Event",
    "Failure",
    "Fault",
    "Flip",
    "Freeze",
    "HangDetected",
    "Injection",
    "InjectionActive",
    "InvalidArgument",
    "InvalidSchedule",
    "MemoryBudget",
    "Outcome",
    "PgAbort",
    "Preempt",
    "Raise",
    "ReorderReduction",
    "RepeatBatch",
    "Run",
    "Schedule",
    "Settings",
    "Verdict",
    "Watchdog",
    "World",
    "baseline",
    "checks",
    "faults",
    "fuzz",
    "inject",
    "judge",
    "mark_step",
    "replay",
    "sites",
    "strategies",
]


def sites() -> dict[str, str]:
    """Every injection site, name to one-line description."""
    return _site_descriptions()


def faults() -> dict[str, str]:
    """Every fault kind, text-form name to one-line description."""
    return _fault_descriptions()


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"ChaosCallback"})


def __getattr__(name: str) -> _typing.Any:
    # Lazy on purpose, not to dodge a cycle: ChaosCallback subclasses Lightning's Callback,
    # so defining it imports Lightning, which `import chaoslight` must not do.
    if name == "ChaosCallback":
        from chaoslight._runtime._callback import ChaosCallback

        return ChaosCallback
    raise AttributeError(f"module 'chaoslight' has no attribute {name!r}")
