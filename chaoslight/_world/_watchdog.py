"""The hang watchdog: notices when no site has been reached for ``timeout`` seconds.

    with chaoslight.inject(schedule, observe=OBSERVED):
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
import faulthandler
import functools
import importlib.util
import math
import os
import signal
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from chaoslight._context import current_rank
from chaoslight._errors import ChaosError, InvalidArgument

LIBRARIES = (
    "torch",
    "lightning",
    "pytorch_lightning",
    "lightning_fabric",
    "lightning_utilities",
    "torchmetrics",
    "chaoslight",
    "wrapt",
)
INTERRUPT_SIGNAL = signal.SIGUSR2
MAX_CODE = 90


class HangDetected(ChaosError):
    """Raised in the main thread by a watchdog: no site was reached for its timeout."""


@dataclass(frozen=True)
class Position:
    """Where a rank's main thread is: the sites it is inside and the user frame calling them."""

    rank: int
    idle_s: float
    sites: tuple[tuple[str, int, int | None], ...] = ()  # outermost first
    function: str | None = None
    filename: str | None = None
    lineno: int | None = None
    code: str | None = None
    inner: str | None = None  # the innermost frame, when it is library code: "fn, file.py:9"

    @property
    def site(self) -> str | None:
        return self.sites[-1][0] if self.sites else None

    def where(self) -> str:
        """``waits in dist.all_reduce #14 at step 3 (training_step → self.log(...), f.py:41)``."""
        if self.sites:
            site, call, step = self.sites[-1]
            verb = "waits in" if site.startswith("dist.") else "is in"
            text = f"{verb} {site} #{call}" + ("" if step is None else f" at step {step}")
        else:
            text = "is outside every site"
        if self.function is not None:
            caller = self.function + (f" → {self.code}" if self.code else "")
            text += f" ({caller}, {Path(self.filename or '?').name}:{self.lineno})"
        if self.inner and not (self.site or "").startswith("dist."):
            text += f" [innermost: {self.inner}]"
        return text

    def line(self) -> str:
        return f"rank {self.rank} {self.where()}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "idle_s": self.idle_s,
            "sites": [list(s) for s in self.sites],
            "function": self.function,
            "filename": self.filename,
            "lineno": self.lineno,
            "code": self.code,
            "inner": self.inner,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Position:
        sites = tuple((str(s), int(c), st) for s, c, st in doc.get("sites", ()))
        return cls(
            doc["rank"],
            doc["idle_s"],
            sites,
            doc.get("function"),
            doc.get("filename"),
            doc.get("lineno"),
            doc.get("code"),
            doc.get("inner"),
        )


@dataclass(frozen=True)
class HangReport:
    """What a watchdog saw when it fired: the position, the timeout, every thread's stack."""

    position: Position
    timeout: float
    stacks: str

    def line(self) -> str:
        return self.position.line()


# -- where the main thread is -------------------------------------------------------------
@functools.cache
def _roots() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    libraries: list[str] = []
    for name in LIBRARIES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations:
            libraries += [os.path.abspath(p) for p in spec.submodule_search_locations]
    paths = sysconfig.get_paths()
    stdlib = tuple({os.path.abspath(paths[k]) for k in ("stdlib", "platstdlib")})
    installed = tuple({os.path.abspath(paths[k]) for k in ("purelib", "platlib")})
    return tuple(libraries), stdlib, installed


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == root or path.startswith(root + os.sep) for root in roots)


def is_library(filename: str) -> bool:
    """True for torch, Lightning, chaoslight, wrapt and the standard library's files."""
    if filename.startswith("<"):
        return True
    libraries, stdlib, installed = _roots()
    path = os.path.abspath(filename)
    return _under(path, libraries) or (_under(path, stdlib) and not _under(path, installed))


def user_frame(frame: FrameType | None) -> FrameType | None:
    """The innermost frame whose file is user code (not a library, see ``is_library``)."""
    while frame is not None and is_library(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def _engine() -> Any:
    from chaoslight._runtime import active

    injection = active()
    return injection.engine if injection is not None else None


def snapshot(thread_id: int | None = None, since: float | None = None) -> Position:
    """Where the main thread (or ``thread_id``) is now, from the active engine and its frame."""
    import linecache

    engine = _engine()
    sites: tuple[tuple[str, int, int | None], ...] = (
        tuple(engine.in_progress) if engine is not None else ()
    )
    last = engine.last_activity if engine is not None else time.monotonic()
    idle = time.monotonic() - max(last, since or last)
    ident = thread_id if thread_id is not None else threading.main_thread().ident
    innermost = sys._current_frames().get(ident or 0)
    frame = user_frame(innermost)
    inner = None
    if innermost is not None and innermost is not frame:
        inner = (
            f"{innermost.f_code.co_name}, {Path(innermost.f_code.co_filename).name}:"
            f"{innermost.f_lineno}"
        )
    if frame is None:
        return Position(current_rank(), idle, sites, inner=inner)
    filename, lineno = frame.f_code.co_filename, frame.f_lineno
    code = linecache.getline(filename, lineno).strip()
    code = code if len(code) <= MAX_CODE else code[: MAX_CODE - 1] + "…"
    return Position(
        current_rank(), idle, sites, frame.f_code.co_name, filename, lineno, code or None, inner
    )


def dump_stacks(path: str | os.PathLike[str] | None = None) -> str:
    """Every thread's Python stack, as faulthandler writes it (also to ``path`` if given)."""
    with tempfile.TemporaryFile("w+") as handle:
        faulthandler.dump_traceback(handle, all_threads=True)
        handle.seek(0)
        text = handle.read()
    if path is not None:
        Path(path).write_text(text)
    return text


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
        engine = _engine()
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
