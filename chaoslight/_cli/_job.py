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

from chaoslight._cli._usage import UsageError
from chaoslight._runtime._autostart import EVENTS_VARIABLE
from chaoslight._runtime._dumps import armed_pids, read_dump, request_dump
from chaoslight._runtime._proc import (
    alive,
    descendants,
    die_with_parent,
    environment_of,
    group_members,
    kill_all,
    kill_group,
    name_of,
)

EXIT_TIMEOUT = 124  # what timeout(1) exits with when the time limit runs out
EXIT_CANNOT_EXECUTE = 126  # as a shell: found but not runnable
EXIT_NOT_FOUND = 127  # as a shell: no such command
DUMP_WAIT_S = 3.0  # how long the processes get to write their stacks
REAP_WAIT_S = 10.0


@dataclass(frozen=True)
class Seen:
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
    seen: list[Seen] = field(default_factory=list)  # at the deadline, before the kill
    leftovers: list[int] = field(default_factory=list)  # killed after the command ended
    unreaped: bool = False  # the command did not exit even after SIGKILL
    killed_by: int | None = None  # the signal that ended the command, if one did


def exit_status(returncode: int) -> int:
    """A child's status as a shell reports it: its own code, or 128 + N if signal N killed it."""
    return 128 - returncode if returncode < 0 else returncode


class Job:
    """The command, its environment, and the folder where its processes leave evidence."""

    def __init__(self, command: list[str], env: dict[str, str], events_dir: Path) -> None:
        self.command = command
        self.env = env
        self.events_dir = events_dir

    def run(self, timeout: float) -> Ending:
        process = self._start()
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return self._time_out(process)
        except BaseException:  # Ctrl-C, SIGTERM: the job must not outlive us
            self._kill(process, self._pids(process.pid))
            raise
        leftovers = self._pids(process.pid, exclude=process.pid)
        self._kill(process, leftovers)
        killed_by = -returncode if returncode < 0 else None
        return Ending(exit_status(returncode), leftovers=leftovers, killed_by=killed_by)

    def _time_out(self, process: subprocess.Popen[bytes]) -> Ending:
        seen: list[Seen] = []
        try:
            seen = self._evidence(process.pid)
        finally:  # with its evidence or without (Ctrl-C while waiting for it), the job ends
            unreaped = self._kill(process, [*(s.pid for s in seen), *self._pids(process.pid)])
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

    def _pids(self, root: int, exclude: int | None = None) -> list[int]:
        """The job's living processes: the tree under ``root``, its process group, and the
        armed processes of this job that left both (daemonised, or in a session of their own)."""
        found = {root, *descendants(root), *group_members(root)}
        marker = str(self.events_dir)
        for pid in armed_pids(self.events_dir):
            if pid not in found and environment_of(pid).get(EVENTS_VARIABLE) == marker:
                found.add(pid)
        return sorted(pid for pid in found if pid != exclude and pid != os.getpid() and alive(pid))

    def _evidence(self, root: int) -> list[Seen]:
        """Every process of the job, with the stacks of the Python ones."""
        armed = set(armed_pids(self.events_dir))
        seen = [
            Seen(pid, name_of(pid), environment_of(pid).get("RANK"), pid in armed)
            for pid in self._pids(root)
        ]
        asked = [s.pid for s in seen if s.armed and request_dump(s.pid)]
        deadline = time.monotonic() + DUMP_WAIT_S
        while time.monotonic() < deadline and not all(self._dumped(pid) for pid in asked):
            time.sleep(0.05)
        time.sleep(0.1)  # faulthandler writes a thread at a time: let the last one land
        return [
            Seen(s.pid, s.name, s.rank, s.armed, read_dump(self.events_dir, s.pid)) for s in seen
        ]

    def _dumped(self, pid: int) -> bool:
        return bool(read_dump(self.events_dir, pid).strip()) or not alive(pid)

    def _kill(self, process: subprocess.Popen[bytes], pids: list[int]) -> bool:
        """SIGKILL the processes and the command's group; False once the command is reaped."""
        kill_all([*pids, *descendants(process.pid)])
        kill_group(process.pid)
        kill_all([process.pid])
        try:
            process.wait(timeout=REAP_WAIT_S)
        except subprocess.TimeoutExpired:
            return True  # stuck in the kernel (D state): nothing more a signal can do
        return False


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
