"""The hang watchdog: notices when no site has been reached for ``timeout`` seconds.

    with chaoslight.inject(schedule, observe=PROGRESS_SITES):
        with Watchdog(timeout=5.0) as dog:
            trainer.fit(model)
    dog.report          # None, or a HangReport: where the main thread was stuck

A daemon thread polls the active engine's ``last_activity``. When it is ``timeout``
seconds old, the watchdog dumps every thread's Python stack (faulthandler) and builds a
``HangReport``: the site the main thread is blocked in (``engine.in_progress``), its
call number on this rank and step, and the innermost user-code frame that called it.
``interrupt_after=s`` also raises ``HangDetected`` in the main thread ``s`` seconds after
firing (a signal, so it interrupts ``time.sleep`` too); a rank blocked inside gloo is
released by its process-group timeout instead. Works in any process, not only a World.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from chaoslight._runtime._stacks import HangReport, active_engine, dump_stacks, snapshot
from chaoslight._schedule._errors import ChaosError, InvalidArgument

INTERRUPT_SIGNAL = signal.SIGUSR2


class HangDetected(ChaosError):
    """Raised in the main thread by a watchdog: no site was reached for its timeout."""


# -- interrupting the main thread ---------------------------------------------------------
class _Interrupts:
    pending: Watchdog | None = None
    previous: Any = None
    installed = False


_INTERRUPTS = _Interrupts()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    dog, _INTERRUPTS.pending = _INTERRUPTS.pending, None
    if dog is not None and not dog.stopped and dog.report is not None:
        raise HangDetected(f"no chaoslight site reached for {dog.timeout:g} s: {dog.report.line()}")
    if callable(_INTERRUPTS.previous):
        _INTERRUPTS.previous(signum, frame)


def _install_handler() -> None:
    if _INTERRUPTS.installed:
        return
    if threading.current_thread() is not threading.main_thread():
        raise InvalidArgument("a Watchdog with interrupt_after must be started in the main thread")
    _INTERRUPTS.previous = signal.signal(INTERRUPT_SIGNAL, _on_signal)
    _INTERRUPTS.installed = True


class Watchdog:
    """A daemon thread that fires once per arming when no site is reached for ``timeout`` s.

    - ``on_hang(report)``: called from the watchdog thread when it fires.
    - ``interrupt_after``: seconds after firing to raise ``HangDetected`` in the main
      thread (None: never). Needs the watchdog armed from the main thread.
    - ``on_tick()``: called every ``tick_every`` seconds while armed (a heartbeat).
    - ``dump_path``: where to also write the stack dump.

    ``with Watchdog(...)`` (or ``start``/``stop``) runs it once; a long-lived process can
    keep one thread and re-arm it per unit of work: ``with dog.watching(timeout): ...``.
    """

    def __init__(
        self,
        timeout: float,
        on_hang: Callable[[HangReport], None] | None = None,
        *,
        interrupt_after: float | None = None,
        on_tick: Callable[[], None] | None = None,
        tick_every: float = 1.0,
        dump_path: str | os.PathLike[str] | None = None,
        poll: float | None = None,
    ) -> None:
        self.on_hang = on_hang
        self.interrupt_after = interrupt_after
        self.on_tick = on_tick
        self.tick_every = tick_every
        self.dump_path = dump_path
        self._poll = poll
        self._set_timeout(timeout)
        self.report: HangReport | None = None
        self.armed = False
        self.stopped = False
        self._round = 0
        self._started = self._next_tick = time.monotonic()
        self._interrupt_at: float | None = None
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._main = threading.main_thread().ident

    def _set_timeout(self, timeout: float) -> None:
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not (math.isfinite(timeout) and timeout > 0)
        ):
            raise InvalidArgument(f"timeout={timeout!r} must be a positive number of seconds")
        self.timeout = float(timeout)
        fastest = min(0.1, self.timeout / 20, self.tick_every if self.on_tick else 0.1)
        self.poll = self._poll if self._poll is not None else max(0.01, fastest)

    # -- lifecycle --------------------------------------------------------------------
    def start(self) -> Watchdog:
        """Arm it and start its thread (once)."""
        self.arm()
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, name="chaoslight-watchdog", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Disarm it and end its thread."""
        self.disarm()
        self._halt.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)

    def arm(self, timeout: float | None = None) -> None:
        """Watch afresh from now: a new report, and optionally a new timeout."""
        if timeout is not None:
            self._set_timeout(timeout)
        if self.interrupt_after is not None:
            _install_handler()
        self.report, self._interrupt_at = None, None
        self._started = time.monotonic()
        self._next_tick = self._started + self.tick_every
        self._round += 1
        self.stopped, self.armed = False, True

    def disarm(self) -> None:
        """Stop watching (the thread stays for the next ``arm``); a late interrupt is void."""
        self.armed, self.stopped = False, True
        if _INTERRUPTS.pending is self:
            _INTERRUPTS.pending = None

    @contextlib.contextmanager
    def watching(self, timeout: float | None = None) -> Iterator[Watchdog]:
        """Arm for the ``with`` block, starting the thread the first time."""
        if self._thread is None:
            self.start()
            if timeout is not None:
                self.arm(timeout)
        else:
            self.arm(timeout)
        try:
            yield self
        finally:
            self.disarm()

    def __enter__(self) -> Watchdog:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- watching ---------------------------------------------------------------------
    def idle(self) -> float:
        """Seconds since a site was last reached (or since the watchdog was armed)."""
        engine = active_engine()
        last = self._started if engine is None else max(self._started, engine.last_activity)
        return time.monotonic() - last

    def check(self) -> HangReport | None:
        """Fire now if armed and the timeout has passed (once per arming); the report."""
        round_ = self._round
        if self.armed and self.report is None and self.idle() >= self.timeout:
            position = snapshot(self._main, since=self._started)
            report = HangReport(position, self.timeout, dump_stacks(self.dump_path))
            if not self.armed or self._round != round_:
                return None  # disarmed (the work finished) while the report was built
            self.report = report
            if self.interrupt_after is not None:
                self._interrupt_at = time.monotonic() + self.interrupt_after
            if self.on_hang is not None:
                self.on_hang(report)
        return self.report

    def _loop(self) -> None:
        while not self._halt.wait(self.poll):
            if not self.armed:
                continue
            if self.on_tick is not None and time.monotonic() >= self._next_tick:
                self._next_tick = time.monotonic() + self.tick_every
                self.on_tick()
            self.check()
            due = self._interrupt_at
            if due is not None and time.monotonic() >= due and self.armed:
                self._interrupt_at = None
                _INTERRUPTS.pending = self
                signal.pthread_kill(self._main or 0, INTERRUPT_SIGNAL)
