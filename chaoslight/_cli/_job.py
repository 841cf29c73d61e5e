"""One job of ``chaoslight run``: start the command, bound it by a deadline, end it whole.

The command leads a session of its own (so a signal meant for chaoslight's terminal does not
reach it half-way); at the deadline every Python process of the job is asked for its stacks,
then the whole tree is killed. Processes the command leaves behind when it ends are killed
too: nothing started under a schedule may outlive ``chaoslight run``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from chaoslight._cli._usage import UsageError
from chaoslight._runtime._autostart import JOB_VARIABLE
from chaoslight._runtime._dumps import armed_pids, read_dump, request_dump
from chaoslight._runtime._proc import (
    alive,
    descendants,
    die_with_parent,
    environment_of,
    exited,
    group_members,
    kill_all,
    kill_group,
    name_of,
    process,
)

EXIT_TIMEOUT = 124  # what timeout(1) exits with when the time limit runs out
EXIT_CANNOT_EXECUTE = 126  # as a shell: found but not runnable
EXIT_NOT_FOUND = 127  # as a shell: no such command
DUMP_WAIT_S = 3.0  # how long the processes get to write their stacks
REAP_WAIT_S = 10.0


@dataclass(frozen=True)
class ProcessSnapshot:
    """A process of the job as it was just before the kill."""

    pid: int
    name: str
    rank: str | None  # RANK in its environment, if the launcher set one
    armed: bool  # a Python process that can dump its stacks
    dump: str = ""


@dataclass
class Ending:
    """How the job ended: the exit status ``chaoslight run`` returns, and the evidence."""

    status: int
    timed_out: bool = False
    seen: list[ProcessSnapshot] = field(default_factory=list)  # at the deadline, before the kill
    leftovers: list[int] = field(default_factory=list)  # killed after the command ended
    unreaped: bool = False  # the command did not exit even after SIGKILL
    killed_by: int | None = None  # the signal that ended the command, if one did


def exit_status(returncode: int) -> int:
    """A child's status as a shell reports it: its own code, or 128 + N if signal N killed it."""
    return 128 - returncode if returncode < 0 else returncode


class CommandJob:
    """The command, its environment, and the folder where its processes leave evidence.

    ``env`` carries the job's token (``JOB_VARIABLE``): a process outside the command's tree
    is the job's only if it has that token, so jobs sharing ``events_dir`` never touch each
    other's processes. The command is reaped only after everything else of the job is
    killed: until then its pid, and its process group's id, cannot name another process.
    """

    def __init__(self, command: list[str], env: dict[str, str], events_dir: Path) -> None:
        self.command = command
        self.env = env
        self.events_dir = events_dir
        self.token = env[JOB_VARIABLE]

    def run(self, timeout: float) -> Ending:
        process = self._start()
        try:
            ended = exited(process.pid, timeout)  # not reaped: see the class docstring
        except BaseException:  # Ctrl-C, SIGTERM: the job must not outlive us
            self._kill(process, self._processes(process.pid))
            raise
        if not ended:
            return self._time_out(process)
        leftovers = self._processes(process.pid, exclude=process.pid)
        self._kill(process, leftovers)
        returncode = process.returncode if process.returncode is not None else process.wait()
        killed_by = -returncode if returncode < 0 else None
        pids = [proc.pid for proc in leftovers]
        return Ending(exit_status(returncode), leftovers=pids, killed_by=killed_by)

    def _time_out(self, process: subprocess.Popen[bytes]) -> Ending:
        seen: list[ProcessSnapshot] = []
        procs = self._processes(process.pid)
        try:
            seen = self._evidence(procs)
        finally:  # with its evidence or without (Ctrl-C while waiting for it), the job ends
            unreaped = self._kill(process, [*procs, *self._processes(process.pid)])
        return Ending(EXIT_TIMEOUT, True, seen, unreaped=unreaped)

    def _start(self) -> subprocess.Popen[bytes]:
        name = self.command[0]
        try:
            # If chaoslight itself is killed outright, the command gets SIGTERM from the
            # kernel: a launcher such as torchrun then takes its ranks down with it.
            return subprocess.Popen(
                self.command,
                env=self.env,
                start_new_session=True,
                preexec_fn=die_with_parent(signal.SIGTERM),
            )
        except FileNotFoundError:
            raise UsageError(f"command not found: {name}", EXIT_NOT_FOUND) from None
        except PermissionError:
            raise UsageError(f"command not executable: {name}", EXIT_CANNOT_EXECUTE) from None
        except OSError as exc:
            raise UsageError(f"cannot run {name}: {exc.strerror}", EXIT_CANNOT_EXECUTE) from None

    def _processes(self, root: int, exclude: int | None = None) -> list[psutil.Process]:
        """The job's living processes: the tree under ``root``, its process group (``root``
        is not yet reaped, so its pid names them), and the armed processes with this job's
        token that left both (daemonised, or in a session of their own)."""
        found = {proc.pid: proc for proc in [*descendants(root), *group_members(root)]}
        top = process(root)
        if top is not None:
            found[root] = top
        for pid in armed_pids(self.events_dir):
            proc = None if pid in found else process(pid)
            if proc is not None and environment_of(proc).get(JOB_VARIABLE) == self.token:
                found[pid] = proc
        return sorted(
            (
                proc
                for pid, proc in found.items()
                if pid not in (exclude, os.getpid()) and alive(proc)
            ),
            key=lambda proc: proc.pid,
        )

    def _evidence(self, procs: list[psutil.Process]) -> list[ProcessSnapshot]:
        """Every process of the job, with the stacks of the Python ones."""
        armed = set(armed_pids(self.events_dir))
        seen = [
            ProcessSnapshot(
                proc.pid, name_of(proc), environment_of(proc).get("RANK"), proc.pid in armed
            )
            for proc in procs
        ]
        by_pid = {proc.pid: proc for proc in procs}
        asked = [s.pid for s in seen if s.armed and _request_dump(by_pid[s.pid])]
        deadline = time.monotonic() + DUMP_WAIT_S
        while time.monotonic() < deadline and not all(self._dumped(by_pid[pid]) for pid in asked):
            time.sleep(0.05)
        time.sleep(0.1)  # faulthandler writes a thread at a time: let the last one land
        return [
            ProcessSnapshot(s.pid, s.name, s.rank, s.armed, read_dump(self.events_dir, s.pid))
            for s in seen
        ]

    def _dumped(self, proc: psutil.Process) -> bool:
        return bool(read_dump(self.events_dir, proc.pid).strip()) or not alive(proc)

    def _kill(self, process: subprocess.Popen[bytes], procs: list[psutil.Process]) -> bool:
        """SIGKILL the processes and the command's group, then reap the command; True if it
        did not exit even then."""
        kill_all([*procs, *descendants(process.pid)])
        if process.returncode is None:  # not reaped: the pid still names its group
            kill_group(process.pid)
        process.kill()  # Popen sends nothing once it has reaped the command
        try:
            process.wait(timeout=REAP_WAIT_S)
        except subprocess.TimeoutExpired:
            return True  # stuck in the kernel (D state): nothing more a signal can do
        return False


def _request_dump(proc: psutil.Process) -> bool:
    """Ask for a process's stacks, if its pid still names it (a dump signal is deadly to
    any other process)."""
    return alive(proc) and request_dump(proc.pid)


@contextlib.contextmanager
def terminate_raises() -> Iterator[None]:
    """SIGTERM and SIGHUP to ``chaoslight run`` end it by an exception, so the job is killed
    on the way out instead of being orphaned (their default action would skip that)."""

    def handler(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous: dict[signal.Signals, Any] = {}
    try:
        for caught in (signal.SIGTERM, signal.SIGHUP):
            previous[caught] = signal.signal(caught, handler)
    except ValueError:  # not the main thread: signals stay as they are
        pass
    try:
        yield
    finally:
        for caught, old in previous.items():
            signal.signal(caught, old)
