"""Preemption notices: SIGTERM delivered to a rank that is expected to go on running.

A ``Preempt`` fault sends SIGTERM to its own process, at the trigger or ``after``
seconds later from a timer thread; with ``group=True`` to its whole process group, as
SLURM does (``_group``: its DataLoader workers get it too). What happens next is the
program's business: its handler, Lightning's, or the default action that ends the
process. Each delivery is recorded with **who handled it** (the oracle needs it: a hang
after Lightning's handler
ran is Lightning's known issue, after the program's own handler it is the program's),
and when the rank ends, the last training step it ran (every rank of a correct program
stops at the same one).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from chaoslight._runtime._deliberate import mark
from chaoslight._runtime._events import NOTE, Event, Record
from chaoslight._runtime._group import group_targets, send_from_outside
from chaoslight._schedule._faults import Preempt

# Detail prefixes the oracle reads back from the event log.
DELIVERED = "SIGTERM delivered"
STOPPED = "last training step"
STEP_SITE = "lightning.training_step"  # armed while a schedule preempts: where ranks stop

# Who handled a delivery, as the delivery note names it.
LIGHTNING, PROGRAM, DEFAULT, IGNORED = "lightning", "the program", "the default action", "ignored"


def handler_owner(handler: Any) -> str:
    """Who owns the installed SIGTERM handler: Lightning (with its package and version,
    e.g. ``lightning (pytorch-lightning 2.6.6)``), the program, or nobody."""
    if handler in (signal.SIG_DFL, None):
        return DEFAULT
    if handler == signal.SIG_IGN:
        return IGNORED
    module = getattr(type(handler), "__module__", "") or ""
    if "signal_connector" in module:  # pytorch_lightning's or lightning.pytorch's
        root = module.split(".")[0]
        version = getattr(sys.modules.get(root), "__version__", "?")
        package = "pytorch-lightning" if root == "pytorch_lightning" else root
        return f"{LIGHTNING} ({package} {version})"
    return PROGRAM


@dataclass(frozen=True)
class Delivery:
    """One SIGTERM that reached a rank, and who handled it."""

    rank: int
    step: int | None
    handler: str  # "lightning (pytorch-lightning 2.6.6)", "the program", "the default action"
    fault: str = ""  # the Preempt's text form

    @property
    def by_lightning(self) -> bool:
        return self.handler.startswith(LIGHTNING)


def sigterm_deliveries(events: Iterable[Event]) -> list[Delivery]:
    """The SIGTERMs delivered in a run, from its delivery notes, in time order (a fired
    Preempt whose timer the end of the run cancelled delivered nothing)."""
    found = []
    for event in events:
        if event.kind == NOTE and event.detail.startswith(DELIVERED):
            handler = event.detail.rsplit("handled by ", 1)[-1]
            found.append(Delivery(event.rank, event.step, handler, event.fault))
    return found


def preempts(faults: Any) -> bool:
    return any(isinstance(fault, Preempt) for fault in faults)


class Notices:
    """The SIGTERMs one engine delivers; timers not yet due are cancelled at close, so a
    notice meant for one example never reaches the worker between examples."""

    def __init__(self, record: Record) -> None:
        self._record = record
        self._lock = threading.RLock()  # a handler may reach another Preempt's site
        self._timers: list[threading.Timer] = []
        self._open = True

    def deliver(self, fault: Preempt, rank: int, step: int | None) -> None:
        if fault.after <= 0:
            self._send(fault, rank, step)
            return
        timer = threading.Timer(fault.after, self._send, (fault, rank, step))
        timer.daemon = True
        timer.name = "chaoslight-preempt"
        with self._lock:
            self._timers.append(timer)
        timer.start()

    def _send(self, fault: Preempt, rank: int, step: int | None) -> None:
        with self._lock:  # close() waits for a delivery under way, then none can start
            if not self._open:
                return
            owner = handler_owner(signal.getsignal(signal.SIGTERM))
            targets = group_targets() if fault.group else None
            scope = f" {targets.words}" if targets is not None else ""
            self._record(
                NOTE,
                fault.site,
                rank,
                step,
                str(fault),
                detail=f"{DELIVERED} to rank {rank}{scope} at step {step}; handled by {owner}",
            )
            try:
                if targets is None:
                    os.kill(os.getpid(), signal.SIGTERM)
                else:
                    send_from_outside(targets)
            except BaseException as raised:
                # A handler written in C (``signal.default_int_handler``) raises here, in our
                # frame: the notice's consequence, not an error of chaoslight's.
                mark(raised)
                raise

    def close(self) -> None:
        with self._lock:
            self._open = False
            timers, self._timers = self._timers, []
        for timer in timers:
            timer.cancel()


def note_stop(record: Record, rank: int, steps: list[int | None] | None) -> None:
    """The last training step this rank ran: where a preempted rank stopped."""
    ran = [s for s in steps or () if s is not None]
    last = max(ran) if ran else None
    record(NOTE, STEP_SITE, rank, last, "", detail=f"{STOPPED} {last}")
