"""What a test may change in the process it runs in, captured and put back.

``ProcessState()`` captures it; ``leaks()`` says, in words, what differs now and puts each
thing back where it can, so a leak fails the test that made it and never the next one:

- every catchable signal's handler, as Python knows it (``signal.getsignal``) and as the
  kernel has it (``sigaction``: faulthandler's fatal-signal handlers and readline's are
  set in C, and Lightning's signal connector, tearing down, resets them all to what
  Python knew), whether faulthandler is on, and the signals blocked;
- the environment and the working directory;
- a non-daemon thread or a child process the test started and left running (a World
  still open keeps its processes: the session's Worlds live from test to test).

``SignalState`` alone is what ``lightning_in_process`` puts back around a test that fits
with Lightning in the test's own process.
"""

from __future__ import annotations

import ctypes
import faulthandler
import gc
import os
import signal
import sys
import threading
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

# Variables pytest itself changes between a test's phases.
PYTEST_VARIABLES = frozenset({"PYTEST_CURRENT_TEST"})
CATCHABLE = sorted(signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP})
SETTLE_S = 5.0  # a thread or child a test ended (or killed) has this long to be gone
SIGACTION_SIZE = 256  # at least ``struct sigaction`` (152 bytes on Linux x86-64)


def _sigaction() -> Callable[..., int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.sigaction  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


SIGACTION = _sigaction()


def raw_handler(signum: int) -> bytes:
    """The signal's ``struct sigaction`` as the kernel has it (empty where unreadable).
    Its first field is the handler (``handler_of``)."""
    if SIGACTION is None:
        return b""
    buffer = ctypes.create_string_buffer(SIGACTION_SIZE)
    if SIGACTION(signum, None, buffer) != 0:
        return b""
    return buffer.raw


def handler_of(raw: bytes) -> bytes:
    """The handler's address in a ``struct sigaction`` (its flags differ as Python sets
    SIG_DFL again, and do not matter then)."""
    return raw[: ctypes.sizeof(ctypes.c_void_p)]


def set_raw_handler(signum: int, raw: bytes) -> None:
    if SIGACTION is not None and raw:
        SIGACTION(signum, ctypes.create_string_buffer(raw, SIGACTION_SIZE), None)


def _name(handler: object) -> str:
    if handler is None:
        return "a handler set outside Python"
    if handler in (signal.SIG_DFL, signal.SIG_IGN):
        return signal.Handlers(handler).name
    return getattr(handler, "__qualname__", None) or repr(handler)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:  # a real-time signal
        return f"signal {signum}"


def _blocked() -> frozenset[int]:
    return frozenset(signal.pthread_sigmask(signal.SIG_BLOCK, []))


@dataclass
class SignalState:
    """Every catchable signal's handler, in Python and in C; faulthandler; the mask."""

    handlers: dict[int, Any] = field(
        default_factory=lambda: {signum: signal.getsignal(signum) for signum in CATCHABLE}
    )
    raw: dict[int, bytes] = field(
        default_factory=lambda: {signum: raw_handler(signum) for signum in CATCHABLE}
    )
    faulthandler: bool = field(default_factory=faulthandler.is_enabled)
    blocked: frozenset[int] = field(default_factory=_blocked)

    def put_back(self, faulthandler_file: Any = None) -> list[str]:
        """What differs now, in words; each put back."""
        found = []
        if faulthandler.is_enabled() != self.faulthandler:
            found.append(f"faulthandler turned {'off' if self.faulthandler else 'on'}")
            if self.faulthandler:
                faulthandler.enable(file=faulthandler_file or sys.__stderr__)
            else:
                faulthandler.disable()
        for signum in CATCHABLE:
            found += self._put_back(signum)
        if _blocked() != self.blocked:
            found.append(f"blocked signals {sorted(self.blocked)} -> {sorted(_blocked())}")
            signal.pthread_sigmask(signal.SIG_SETMASK, self.blocked)
        _torch_sigchld_flag()
        return found

    def put_back_frameworks(self) -> None:
        """Put back what an in-process fit changes: the handlers set in C that Lightning's
        teardown resets to what Python knew, and torch's SIGCHLD handler (its DataLoader's)."""
        for signum in CATCHABLE:
            if signum == signal.SIGCHLD or signal.getsignal(signum) == self.handlers[signum]:
                self._put_back(signum)
        _torch_sigchld_flag()

    def _put_back(self, signum: int) -> list[str]:
        name = _signal_name(signum)
        was, now = self.handlers[signum], signal.getsignal(signum)
        found = []
        if now != was:
            found.append(f"{name}'s handler {_name(was)} -> {_name(now)}")
            if was is not None:
                signal.signal(signum, was)
        if handler_of(raw_handler(signum)) != handler_of(self.raw[signum]):
            if now == was:  # a handler set in C (faulthandler's, readline's) went or came
                found.append(f"{name}'s handler in C changed (Python's stayed {_name(was)})")
            with suppress(RuntimeError, ValueError):
                faulthandler.unregister(signum)  # it puts back what it replaced
            set_raw_handler(signum, self.raw[signum])
        return found


def _torch_sigchld_flag() -> None:
    """torch's DataLoader sets its SIGCHLD handler once and remembers it did: with the
    handler put back as it was (Lightning's teardown does that too), the flag goes back,
    or a later test's DataLoader would set none and miss its dead workers."""
    handling = sys.modules.get("torch.utils.data._utils.signal_handling")
    if handling is not None and signal.getsignal(signal.SIGCHLD) in (signal.SIG_DFL, None):
        setattr(handling, "_SIGCHLD_handler_set", False)  # noqa: B010 (torch private)


def _children() -> set[int]:
    """The pids of this process's children, from the kernel's list of each thread's (fast:
    psutil would read every process on the machine); psutil's where there is no list."""
    try:
        tasks = os.listdir("/proc/self/task")
        return {
            int(pid)
            for task in tasks
            for pid in Path(f"/proc/self/task/{task}/children").read_text().split()
        }
    except OSError:
        return {child.pid for child in psutil.Process().children()}


def _running(pid: int) -> psutil.Process | None:
    """The process ``pid`` if it has not exited (whoever started a zombie reaps it)."""
    try:
        proc = psutil.Process(pid)
        return proc if proc.status() != psutil.STATUS_ZOMBIE else None
    except psutil.Error:
        return None


def world_processes() -> set[int]:
    """Every process an open World of this process holds, its folder's reaper included."""
    from chaoslight import World

    held: set[int] = set()
    # type(), not isinstance(): that reads __class__, and torch's deprecated aliases warn.
    for world in [obj for obj in gc.get_objects() if type(obj) is World]:
        if world.closed:
            continue
        with suppress(Exception):  # a World still starting may not know every pid yet
            held.update(world.processes)
        peeked = world._finalizer.peek()
        reaper = peeked[2][4] if peeked is not None else None
        if reaper is not None:
            held.add(reaper.pid)
    return held


@dataclass
class ProcessState:
    """What a test may change in its worker process and must put back."""

    signals: SignalState = field(default_factory=SignalState)
    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    cwd: str = field(default_factory=os.getcwd)
    threads: set[threading.Thread] = field(
        default_factory=lambda: {t for t in threading.enumerate() if not t.daemon}
    )
    children: set[int] = field(default_factory=_children)

    def leaks(self, faulthandler_file: Any = None) -> list[str]:
        """What differs now, in words, each put back where it can be."""
        found = self.signals.put_back(faulthandler_file)
        found += self._environment()
        found += self._threads()
        found += self._processes()
        return found

    def _environment(self) -> list[str]:
        found = []
        now = {k: v for k, v in os.environ.items() if k not in PYTEST_VARIABLES}
        was = {k: v for k, v in self.environ.items() if k not in PYTEST_VARIABLES}
        for name in sorted(now.keys() | was.keys()):
            if now.get(name) != was.get(name):
                found.append(f"environment {name}={was.get(name)!r} -> {now.get(name)!r}")
                if name in was:
                    os.environ[name] = was[name]
                else:
                    del os.environ[name]
        if os.getcwd() != self.cwd:
            found.append(f"working directory {self.cwd} -> {os.getcwd()}")
            os.chdir(self.cwd)
        return found

    def _threads(self) -> list[str]:
        """A thread cannot be stopped from outside: it is waited for, then named."""
        found = []
        for thread in [t for t in threading.enumerate() if not t.daemon]:
            if thread not in self.threads:
                thread.join(SETTLE_S)
                if thread.is_alive():
                    found.append(f"non-daemon thread {thread.name!r} still running")
        return found

    def _processes(self) -> list[str]:
        new = [proc for pid in _children() - self.children if (proc := _running(pid))]
        if new:  # the session's Worlds replace their processes: theirs are not the test's
            held = world_processes()
            new = [proc for proc in new if proc.pid not in held]
        if not new:
            return []
        _, running = psutil.wait_procs(new, timeout=SETTLE_S)
        found = []
        for child in running:
            with suppress(psutil.Error):
                found.append(f"child process {child.pid} {child.cmdline()[:4]} still running")
                for proc in [*child.children(recursive=True), child]:
                    with suppress(psutil.Error):
                        proc.kill()
        psutil.wait_procs(running, timeout=SETTLE_S)
        return found
