"""What a freeze and a process-group abort do to the rank they fire in.

A **freeze** stops the rank while it stays alive: SIGSTOP (every thread stops; a helper
process sends SIGCONT after the freeze's seconds, since a stopped process cannot wake
itself), or a sleep in native code that holds the GIL (no Python thread runs). Whoever
listens (``FREEZE_LISTENERS``: the World's worker) is told first, so the silence that
follows is known to be the fault's, not a hang of the program's.

An **abort** ends the rank's process group from under it, as ``ProcessGroupNCCL.abort()``
does: the ``ABORTERS`` (the World's worker shuts its gloo connections down) or, where
none is registered, torch's ``_abort_process_group``; the collective raises a marked
``DistBackendError`` and every later one fails.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from chaoslight._runtime._deliberate import mark
from chaoslight._runtime._proc import die_with_parent
from chaoslight._schedule._faults import ABORTED_GROUP_MARK

# Called, in the frozen thread, just before a freeze stops the rank: with its seconds
# (None: for good) and how.
FREEZE_LISTENERS: list[Callable[[float | None, str], None]] = []
# Each shuts the rank's process-group connections down; how many it shut.
ABORTERS: list[Callable[[], int]] = []

# The helper that wakes a stopped rank: it starts counting once the rank is stopped (a
# SIGCONT sent before the SIGSTOP lands would be lost, and the rank stopped for good).
WAKER = """
import os, signal, sys, time
pid, seconds = int(sys.argv[1]), float(sys.argv[2])
def stopped():
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return True  # no /proc, or the rank is gone: count from now
deadline = time.monotonic() + 10
while not stopped() and time.monotonic() < deadline:
    time.sleep(0.005)
time.sleep(seconds)
try:
    os.kill(pid, signal.SIGCONT)
except OSError:
    pass
"""
MAX_NATIVE_SLEEP_S = 1000.0  # usleep takes an unsigned int of microseconds


def freeze(seconds: float | None, how: str) -> None:
    """Stop this rank for ``seconds`` (None: for good), by SIGSTOP or holding the GIL."""
    for listener in list(FREEZE_LISTENERS):
        with contextlib.suppress(Exception):  # a listener must never keep the fault off
            listener(seconds, how)
    if how == "gil":
        hold_gil(seconds)
    else:
        stop(seconds)


def stop(seconds: float | None) -> None:
    """SIGSTOP this process; a helper in its process group sends SIGCONT after ``seconds``
    (whoever kills the group kills the helper too, and it dies with this process)."""
    helper = None
    if seconds is not None:
        helper = subprocess.Popen(
            [sys.executable, "-S", "-c", WAKER, str(os.getpid()), repr(float(seconds))],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent(signal.SIGKILL),
        )
    os.kill(os.getpid(), signal.SIGSTOP)
    if helper is not None:
        helper.wait()  # it sent SIGCONT and ends: reap it, leave no zombie


def hold_gil(seconds: float | None) -> None:
    """Sleep in native code without releasing the GIL: ``ctypes.PyDLL`` calls keep it."""
    libc = ctypes.PyDLL(None)
    if seconds is None:
        while True:
            libc.pause()  # returns only when a signal's handler runs
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        libc.usleep(ctypes.c_uint(int(min(left, MAX_NATIVE_SLEEP_S) * 1e6)))


def abort_group(fault: str) -> BaseException:
    """Abort this rank's process group; the error its collective raises, marked."""
    import torch.distributed as dist

    if ABORTERS:
        for aborter in list(ABORTERS):
            aborter()
    elif dist.is_initialized():
        with contextlib.suppress(Exception):  # torch's own abort, on any backend
            dist.distributed_c10d._abort_process_group()
    return mark(
        dist.DistBackendError(
            f"{ABORTED_GROUP_MARK} ({fault}): the collective fails as on an aborted "
            "communicator, and every later one of this rank fails too"
        )
    )
