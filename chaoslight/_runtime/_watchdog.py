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
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from chaoslight._runtime._deliberate import mark
from chaoslight._runtime._stacks import HangReport, active_engine, hang_stacks, snapshot
from chaoslight._schedule._errors import ChaosError, InvalidArgument
from chaoslight._schedule._validate import check_seconds

INTERRUPT_SIGNAL = signal.SIGUSR2


class HangDetected(ChaosError):
    """Raised in the main thread by a watchdog: no site was reached for its timeout."""


# -- interrupting the main thread ---------------------------------------------------------
class _Interrupts:
    """The process-wide SIGUSR2 handler, shared by every watchdog that can interrupt.

    It is installed when the first such watchdog arms and the handler that was there
    before is put back when the last one stops (after its thread has ended, so no
    interrupt of ours can arrive under a handler that would kill the process).
    """

    def __init__(self) -> None:
        self.pending: Watchdog | None = None
        self.previous: Any = None  # the handler ours replaced
        self.installed = False
        self.users: list[Watchdog] = []  # the watchdogs that may interrupt, while armed or not


_INTERRUPTS = _Interrupts()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    dog, _INTERRUPTS.pending = _INTERRUPTS.pending, None
    if dog is not None and not dog.stopped and dog.report is not None:
        line = dog.report.line()
        raise mark(HangDetected(f"no chaoslight site reached for {dog.timeout:g} s: {line}"))
    if callable(_INTERRUPTS.previous):
        _INTERRUPTS.previous(signum, frame)


def _install_handler(dog: Watchdog) -> None:
    if any(user is dog for user in _INTERRUPTS.users):
        return
    if not _INTERRUPTS.installed:
        if threading.current_thread() is not threading.main_thread():
            raise InvalidArgument(
                "a Watchdog with interrupt_after must be started in the main thread"
            )
        _INTERRUPTS.previous = signal.signal(INTERRUPT_SIGNAL, _on_signal)
        _INTERRUPTS.installed = True
    _INTERRUPTS.users.append(dog)


def _release_handler(dog: Watchdog) -> None:
    """``dog`` no longer interrupts; the last one out puts the previous handler back.

    Only if ours is still the handler: one installed after ours (which may forward to
    ours) is left alone. Ours stays where nothing can be restored, outside the main
    thread (Python sets handlers only there) or when the old handler was set outside
    Python; with nothing pending it forwards a signal to the old handler, if it can.
    """
    _INTERRUPTS.users = [user for user in _INTERRUPTS.users if user is not dog]
    if _INTERRUPTS.users or not _INTERRUPTS.installed:
        return
    if threading.current_thread() is not threading.main_thread():
        return
    if _INTERRUPTS.previous is None:
        return  # the old handler was set outside Python (None): it cannot be put back
    if signal.getsignal(INTERRUPT_SIGNAL) is _on_signal:
        signal.signal(INTERRUPT_SIGNAL, _INTERRUPTS.previous)
        _INTERRUPTS.previous = None
    _INTERRUPTS.installed = False


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
        self.tick_errors = 0  # exceptions its ticks raised (it went on), and the last one
        self.last_error: Exception | None = None

    def _set_timeout(self, timeout: float) -> None:
        self.timeout = check_seconds("timeout", timeout)
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
        """Disarm it, end its thread, and put back the signal handler it installed."""
        self.disarm()
        self._halt.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        if self._thread is None or not self._thread.is_alive():
            _release_handler(self)  # its thread is gone: no interrupt of ours can follow

    def arm(self, timeout: float | None = None) -> None:
        """Watch afresh from now: a new report, and optionally a new timeout."""
        if timeout is not None:
            self._set_timeout(timeout)
        if self.interrupt_after is not None:
            _install_handler(self)
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
            report = HangReport(position, self.timeout, hang_stacks(self.dump_path))
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
            # Each step guarded on its own: a watchdog thread that died, or a heartbeat that
            # always raised, would never report a hang.
            if self.on_tick is not None and time.monotonic() >= self._next_tick:
                self._next_tick = time.monotonic() + self.tick_every
                self._guarded(self.on_tick)
            self._guarded(self._fire)

    def _fire(self) -> None:
        self.check()
        due = self._interrupt_at
        if due is not None and time.monotonic() >= due and self.armed:
            self._interrupt_at = None
            _INTERRUPTS.pending = self
            signal.pthread_kill(self._main or 0, INTERRUPT_SIGNAL)

    def _guarded(self, step: Callable[[], object]) -> None:
        """Run one step of a tick; an exception is recorded (the first printed with its
        traceback: a rank's stderr is its log) and the loop goes on."""
        try:
            step()
        except Exception as exc:
            self.tick_errors += 1
            self.last_error = exc
            if self.tick_errors == 1:
                print("chaoslight: the watchdog's tick raised; it goes on:", file=sys.stderr)
                traceback.print_exception(exc, file=sys.stderr)
