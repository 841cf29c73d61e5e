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
import select
import signal
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import psutil

# What a process can do while we look at it: end, or belong to someone we may not inspect.
_GONE = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess)
PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def process(pid: int) -> psutil.Process | None:
    """The process now named ``pid``, or None. psutil pins it by its start time: a signal
    sent through it never reaches a later process that was given the same pid."""
    try:
        return psutil.Process(pid)
    except _GONE:
        return None


def descendants(pid: int) -> list[psutil.Process]:
    """Every living process below ``pid`` (children, grandchildren, ...)."""
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except _GONE:
        return []


def alive(proc: psutil.Process) -> bool:
    """True while ``proc`` has not yet exited (a zombie has), and its pid is still its own."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except _GONE:
        return False


def name_of(proc: psutil.Process) -> str:
    """The process's name (``python3``, ``torchrun``), or ``?`` once it is gone."""
    try:
        return str(proc.name())
    except _GONE:
        return "?"


def environment_of(proc: psutil.Process) -> dict[str, str]:
    """The process's environment, or an empty dict where it cannot be read."""
    try:
        return dict(proc.environ())
    except (*_GONE, OSError):
        return {}


def group_members(pgid: int) -> list[psutil.Process]:
    """The living processes of process group ``pgid`` (what a finished job left behind).

    Only while the group's leader is not yet reaped (or other members live) does ``pgid``
    name this group: the caller must make sure of that."""
    members = []
    for pid in psutil.pids():
        with contextlib.suppress(OSError):
            if os.getpgid(pid) == pgid and (found := process(pid)) is not None and alive(found):
                members.append(found)
    return members


def kill_all(procs: Iterable[psutil.Process]) -> None:
    """SIGKILL each of ``procs``; those gone (or whose pid was reused) are skipped."""
    for proc in procs:
        with contextlib.suppress(*_GONE):
            proc.kill()  # psutil checks first that the pid still names this process


def kill_group(pgid: int) -> None:
    """SIGKILL the process group ``pgid`` (a job's leftovers); a missing group is ignored.
    Call it only while the group's leader is not yet reaped (see ``group_members``)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def exited(pid: int, timeout: float | None) -> bool:
    """Wait up to ``timeout`` s (None: for ever) for the child ``pid`` to exit, *without*
    reaping it; True once it has exited. Until it is reaped its pid, and its process
    group's id, cannot be given to another process, so both may still be signalled."""
    try:
        handle = os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux 5.3+: poll instead
        handle = None
    if handle is not None:
        try:
            return bool(select.select([handle], [], [], timeout)[0])
        finally:
            os.close(handle)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:  # already reaped
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


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
    if _prctl() is None:
        return None
    return functools.partial(die_with, os.getpid(), int(signum))


def die_with(parent: int, signum: int = signal.SIGKILL) -> None:
    """In a child of ``parent``, just after the fork: the kernel sends ``signum`` when the
    parent dies. A system call, nothing more (safe between fork and exec)."""
    prctl = _prctl()
    if prctl is None:
        return
    prctl(PR_SET_PDEATHSIG, int(signum))
    if os.getppid() != parent:  # the parent died before prctl: no signal will come
        os._exit(1)
