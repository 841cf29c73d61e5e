"""Tracing: an ``enter`` and an ``exit`` event around every site call, for the timeline.

``inject(..., trace=True)`` arms every site (``TRACED_SITES``) and gives the engine a
``Tracer``. The events go to the rank's event log like every other, each flushed as it
happens: a rank killed inside a call leaves its ``enter`` without an ``exit``, and the
timeline shows that span open until the lane's end. Only the main thread is traced: its
calls nest, so each ``exit`` closes the innermost open span (DataLoader and user threads
would interleave with it).

An ``enter`` of a collective (``dist.*``) carries the rank's collective sequence number in
its ``detail`` (``#7``): its count of collective calls so far, this one included, as the
wavefront counts them (``_world/_wavefront.py``). An ``exit`` whose call raised says so
(``raised RuntimeError``).
"""

from __future__ import annotations

import sys
import threading

from chaoslight._runtime._events import EventKind, Record
from chaoslight._schedule._catalog import COLLECTIVES, SITES

ENTER, EXIT = EventKind.ENTER, EventKind.EXIT
SPAN_KINDS = frozenset({ENTER, EXIT})
# Every collective the catalogue wraps; DDP's gradient all-reduce is a site of its own.
COLLECTIVE_SITES = frozenset(f"dist.{name}" for name in COLLECTIVES)
# Every site but DDP's gradient all-reduce: observing it registers a Python comm hook,
# which changes DDP's averaging arithmetic (see PROGRESS_SITES). A schedule naming it
# still arms it, and then it is traced too.
TRACED_SITES = frozenset(SITES) - {"dist.gradient_allreduce"}


class Tracer:
    """Records the spans of the main thread's site calls through ``record``."""

    def __init__(self, record: Record) -> None:
        self.record = record
        self.main = threading.main_thread().ident
        self.collectives = 0
        # Per open span, the exception being handled when it was entered: a call made
        # inside an ``except`` block must not look as if it raised.
        self.handling: list[BaseException | None] = []

    def enter(self, site: str, rank: int, step: int | None, call: int) -> None:
        if threading.get_ident() != self.main:
            return
        detail = ""
        if site in COLLECTIVE_SITES:
            self.collectives += 1
            detail = f"#{self.collectives}"
        self.handling.append(sys.exc_info()[1])
        self.record(ENTER, site, rank, step, "", call, detail)

    def exit(self, site: str, rank: int, step: int | None, call: int) -> None:
        """Called from the engine's ``finally``: an exception propagating is visible there."""
        if threading.get_ident() != self.main or not self.handling:
            return
        before = self.handling.pop()
        error = sys.exc_info()[1]
        detail = "" if error is None or error is before else f"raised {type(error).__name__}"
        self.record(EXIT, site, rank, step, "", call, detail)
