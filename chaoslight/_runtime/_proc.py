"""Process-tree helpers: nothing chaoslight starts may outlive it.

Launchers (torchrun, Lightning's ddp launcher) may put ranks in sessions of their own,
so killing a process group is not enough: the whole tree is found with psutil and
killed with SIGKILL, since a stuck gloo rank ignores SIGTERM.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import psutil

# What a process can do while we look at it: end, or belong to someone we may not inspect.
_GONE = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess)
PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def descendants(pid: int) -> list[int]:
    """Every living process below ``pid`` (children, grandchildren, ...)."""
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except _GONE:
        return []


def alive(pid: int) -> bool:
    """True while ``pid`` is a process that has not yet exited (a zombie has)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except _GONE:
        return False


def name_of(pid: int) -> str:
    """The process's name (``python3``, ``torchrun``), or ``?`` once it is gone."""
    try:
        return str(psutil.Process(pid).name())
    except _GONE:
        return "?"


def environment_of(pid: int) -> dict[str, str]:
    """The process's environment, or an empty dict where it cannot be read."""
    try:
        return dict(psutil.Process(pid).environ())
    except (*_GONE, OSError):
        return {}


def group_members(pgid: int) -> list[int]:
    """The living processes of process group ``pgid`` (what a finished job left behind)."""
    members = []
    for pid in psutil.pids():
        with contextlib.suppress(OSError):
            if os.getpgid(pid) == pgid and alive(pid):
                members.append(pid)
    return members


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and everything below it; missing processes are ignored."""
    kill_all([*descendants(pid), pid])


def kill_all(pids: Iterable[int]) -> None:
    """SIGKILL each of ``pids``; missing processes are ignored."""
    for target in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(target, signal.SIGKILL)


def kill_group(pgid: int) -> None:
    """SIGKILL the process group ``pgid`` (a job's leftovers); a missing group is ignored."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def wait_gone(pids: Iterable[int], timeout: float) -> list[int]:
    """Wait up to ``timeout`` s for ``pids`` to exit; return those still alive."""
    deadline = time.monotonic() + timeout
    left = [pid for pid in pids if alive(pid)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [pid for pid in left if alive(pid)]
    return left


@functools.cache
def _prctl() -> Any:
    """libc's ``prctl``, or None where there is none (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def die_with_parent(signum: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel send ``signum`` to the child when this process
    dies, however it dies (SIGKILL included); None where that is not possible (not Linux).

    The signal comes when the *thread* that started the child ends, so the starting thread
    must outlive the child (the main thread does).
    """
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()
    number = int(signum)

    def arm() -> None:  # in the child between fork and exec: a system call, nothing more
        prctl(PR_SET_PDEATHSIG, number)
        if os.getppid() != parent:  # the parent died before prctl: no signal will come
            os._exit(1)

    return arm
