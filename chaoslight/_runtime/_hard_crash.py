"""A crash fault's death: the way the signal really comes, not a signal sent to oneself.

A native crash is synchronous: SIGSEGV comes from the faulting instruction, SIGABRT from
``abort()``, SIGBUS from touching a mapped page past the end of its file. No Python
handler can turn any of them into an exception: CPython's C handler only sets a flag and
returns, so the faulting instruction runs again (a segfault) or ``abort()`` restores the
default action and raises again (an abort). What does run is a handler written in C,
faulthandler's above all: its dump of every thread's stack is what a real crash leaves in
the log, and a program that enabled it gets it here too. ``os.kill`` would instead let a
Python handler of the program's turn the "crash" into an exception, which no real one is.

The process's core-file limit is set to 0 first: a rank that dumped core would leave a
file of its whole memory in the working directory for every crash a search draws.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import signal
import tempfile
from collections.abc import Callable
from typing import NoReturn

from chaoslight._runtime._deliberate import mark

PAGE = mmap.PAGESIZE


def no_core_files() -> None:
    """Set this process's core-file limit to 0 (its soft limit; the hard one is kept)."""
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource  # not on Windows

        _, hard = resource.getrlimit(resource.RLIMIT_CORE)
        resource.setrlimit(resource.RLIMIT_CORE, (0, hard))


def _uncatchable_by_python(signum: int) -> None:
    """A real segfault meets no Python handler (CPython would loop on the faulting
    instruction, re-raising for ever): put the default action back where the program set
    a Python one. A handler written in C (faulthandler's) is not Python's, and stays."""
    handler = signal.getsignal(signum)
    if callable(handler):
        signal.signal(signum, signal.SIG_DFL)


def segfault() -> None:
    """``strlen`` of address 0: the kernel sends SIGSEGV from the faulting instruction
    (``string_at(0, n)`` would not fault: CPython reads a NULL source as "allocate")."""
    _uncatchable_by_python(signal.SIGSEGV)
    ctypes.string_at(0)


def abort() -> None:
    """``abort()``, as a failed native assertion or ``std::terminate`` calls it."""
    os.abort()


def bus_error() -> None:
    """Touch a mapped page whose file was cut short under it: the kernel sends SIGBUS."""
    sigbus = getattr(signal, "SIGBUS", None)
    if sigbus is None:
        return
    _uncatchable_by_python(sigbus)
    with tempfile.TemporaryFile() as backing:  # already unlinked: it leaves no file
        backing.write(b"\0" * PAGE)
        backing.flush()
        mapped = mmap.mmap(backing.fileno(), PAGE)
        address = ctypes.addressof(ctypes.c_char.from_buffer(mapped))
        backing.truncate(0)
        ctypes.string_at(address, 1)


# How each signal comes in a real crash; a signal not listed is sent as a kill is.
REAL_DEATHS: dict[int, Callable[[], None]] = {
    int(signal.SIGSEGV): segfault,
    int(signal.SIGABRT): abort,
    **({int(signal.SIGBUS): bus_error} if hasattr(signal, "SIGBUS") else {}),
}


def die_of(signum: int) -> None:
    """End this process by ``signum`` the way it comes in production: a native crash for
    SIGSEGV, SIGABRT and SIGBUS, a kill from outside for the others (SIGKILL, SIGTERM).
    A handler of a killing signal may raise (a SIGTERM handler): that error is the
    fault's, marked as deliberate, and this returns only where a handler let it live."""
    __tracebackhide__ = True
    no_core_files()
    real = REAL_DEATHS.get(signum)
    if real is not None:
        real()
        _last_resort(signum)  # unreachable on Linux and macOS: the native crash kills
    try:
        os.kill(os.getpid(), signum)
    except BaseException as raised:  # what a handler of the signal raised, at once
        mark(raised)
        raise


def _last_resort(signum: int) -> NoReturn:
    """Where a native crash did not kill (a platform that maps page 0), the signal sent,
    past any Python handler (a C one, faulthandler's, still runs)."""
    _uncatchable_by_python(signum)
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)
