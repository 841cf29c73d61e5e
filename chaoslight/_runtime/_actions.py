"""What each fault kind does when it fires (``ACTIONS``), and what the faults firing at one
site call ask of that call (``Firing``).

The engine decides which faults fire at a call and runs each one's action before the
wrapped call, as ``action(engine, fault, firing)``; an action either acts at once (sleeps,
raises, sends a signal, notes an allocation) or writes into the ``Firing`` what the call
must become (skipped, poisoned after, wrapped). A new kind enters its action here, by its
fault class; an action with machinery of its own is written in the runtime module of its
concept (``_halt``, ``_hard_crash``, ``_data_actions``) and entered here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chaoslight._runtime._context import device_of
from chaoslight._runtime._data_actions import (
    apply_bad_checkpoint,
    apply_drop_batch,
    apply_flip,
    apply_repeat_batch,
)
from chaoslight._runtime._deliberate import mark
from chaoslight._runtime._halt import abort_group, freeze
from chaoslight._runtime._hard_crash import die_of
from chaoslight._runtime._memory import simulated_oom
from chaoslight._schedule._faults import (
    OOM,
    Allocate,
    BadCheckpoint,
    Corrupt,
    Crash,
    Delay,
    DropBatch,
    DropSync,
    Fault,
    Flip,
    Freeze,
    PgAbort,
    Preempt,
    Raise,
    ReorderReduction,
    RepeatBatch,
)


@dataclass
class Firing:
    """The faults that fire at one site call, the order every rank sums in there (a
    reorder on any rank), and what their actions ask of the wrapped call: skip it, or
    poison its result with these values."""

    rank: int
    step: int | None
    faults: list[Fault] = field(default_factory=list)
    reorder: str | None = None
    skip: bool = False
    poison: list[float] = field(default_factory=list)
    # Wrappers of the call (outermost last): a fetch that reads twice, a damaged load.
    around: list[Callable[[Any], Any]] = field(default_factory=list)


# An action is called with the engine (``_engine.Engine``, which imports this table, so it
# is typed loosely here), the fault and the firing; named ``_apply_<kind>`` so a traceback
# says which fault.
Action = Callable[[Any, Any, Firing], None]


def _apply_delay(engine: Any, fault: Delay, firing: Firing) -> None:
    time.sleep(fault.seconds)


def _apply_oom(engine: Any, fault: OOM, firing: Firing) -> None:
    __tracebackhide__ = True
    device = device_of(engine.trainer) if engine.trainer is not None else None
    error = simulated_oom(fault.nbytes, firing.rank, str(fault), device=device)
    if fault.aborts():
        raise error
    engine.pending_oom = error  # CUDA reports it late: at the next sync point


def _apply_allocate(engine: Any, fault: Allocate, firing: Firing) -> None:
    release = None
    if fault.hold_steps is not None and firing.step is not None:
        release = firing.step + fault.hold_steps
    with engine.internal():
        engine.ledger.allocate(fault.nbytes, device_of(engine.trainer), release, str(fault))


def _apply_drop_sync(engine: Any, fault: DropSync, firing: Firing) -> None:
    firing.skip = True


def _apply_reorder(engine: Any, fault: ReorderReduction, firing: Firing) -> None:
    """Nothing before the call: the engine chose the order every rank sums in."""


def _apply_raise(engine: Any, fault: Raise, firing: Firing) -> None:
    __tracebackhide__ = True
    raise mark(engine.exceptions[fault.exception](*fault.args))


def _apply_corrupt(engine: Any, fault: Corrupt, firing: Firing) -> None:
    firing.poison.append(float(fault.value))


def _apply_crash(engine: Any, fault: Crash, firing: Firing) -> None:
    __tracebackhide__ = True
    # Every event is already flushed to the kernel; the log stays open, so a rank that
    # survives the signal (a SIGTERM handler) keeps recording.
    die_of(fault.signal)


def _apply_preempt(engine: Any, fault: Preempt, firing: Firing) -> None:
    engine.notices.deliver(fault, firing.rank, firing.step)


def _apply_freeze(engine: Any, fault: Freeze, firing: Firing) -> None:
    freeze(fault.seconds, fault.how)


def _apply_pg_abort(engine: Any, fault: PgAbort, firing: Firing) -> None:
    __tracebackhide__ = True
    raise abort_group(str(fault))


# What each kind does when it fires, before the wrapped call: one entry per fault class
# (a new kind adds its own).
ACTIONS: dict[type[Fault], Action] = {
    Delay: _apply_delay,
    OOM: _apply_oom,
    Allocate: _apply_allocate,
    DropSync: _apply_drop_sync,
    ReorderReduction: _apply_reorder,
    Raise: _apply_raise,
    Corrupt: _apply_corrupt,
    Crash: _apply_crash,
    Preempt: _apply_preempt,
    Flip: apply_flip,
    RepeatBatch: apply_repeat_batch,
    DropBatch: apply_drop_batch,
    BadCheckpoint: apply_bad_checkpoint,
    Freeze: _apply_freeze,
    PgAbort: _apply_pg_abort,
}
