"""Stack dumps on request, for the evidence of where a timed-out job waits.

``chaoslight run``'s ``sitecustomize`` calls :func:`arm_dumps` in every Python process of
the job: it opens ``$CHAOSLIGHT_EVENTS_DIR/stacks-<pid>.txt`` and has faulthandler write
every thread's stack there on ``DUMP_SIGNAL``. faulthandler writes from the signal handler
itself, in C, so a rank blocked inside a gloo collective (where no Python signal handler
would ever run) still answers. The file's existence says the process is armed: only
armed processes are sent the signal, whose default action would kill the others.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import re
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil

from chaoslight._runtime._autostart import EVENTS_VARIABLE
from chaoslight._runtime._frames import is_library


def _dump_signal() -> int | None:
    """A real-time signal near the top of the range, where there are real-time signals
    (Linux); elsewhere None: no dumps. SIGUSR1 is Lightning's SLURM requeue signal and
    SIGUSR2 the watchdog's, and programs install handlers for both."""
    top = getattr(signal, "SIGRTMAX", None)
    return int(top) - 3 if top is not None else None


DUMP_SIGNAL = _dump_signal()
STACKS_PREFIX = "stacks-"

_armed: IO[str] | None = None  # kept open for the life of the process: faulthandler writes here
_FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+) in (?P<function>.*)$')


def stack_file(events_dir: str | os.PathLike[str], pid: int) -> Path:
    return Path(events_dir) / f"{STACKS_PREFIX}{pid}.txt"


def arm_dumps() -> None:
    """In a job's process: dump every thread's stack to this process's file on DUMP_SIGNAL."""
    global _armed
    events_dir = os.environ.get(EVENTS_VARIABLE)
    if not events_dir or _armed is not None or DUMP_SIGNAL is None:
        return
    # Evidence is a bonus: a folder we cannot write must not stop the user's program.
    with contextlib.suppress(OSError):
        Path(events_dir).mkdir(parents=True, exist_ok=True)
        _armed = open(stack_file(events_dir, os.getpid()), "w")  # noqa: SIM115
        faulthandler.register(DUMP_SIGNAL, file=_armed, all_threads=True, chain=False)


def armed_pids(events_dir: str | os.PathLike[str]) -> list[int]:
    """The processes that armed a stack dump in ``events_dir`` (alive or not)."""
    pids = []
    for path in Path(events_dir).glob(f"{STACKS_PREFIX}*.txt"):
        number = path.stem[len(STACKS_PREFIX) :]
        if number.isdigit():
            pids.append(int(number))
    return sorted(pids)


def request_dump(pid: int) -> bool:
    """Ask an armed process for its stacks; False if it is already gone."""
    if DUMP_SIGNAL is None:
        return False
    try:
        os.kill(pid, DUMP_SIGNAL)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def read_dump(events_dir: str | os.PathLike[str], pid: int) -> str:
    try:
        return stack_file(events_dir, pid).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def remove_empty_dumps(events_dir: str | os.PathLike[str]) -> None:
    """Drop the files of ended processes that were never asked: they hold nothing. A
    living process's file stays (another job sharing the folder may still ask it)."""
    for pid in armed_pids(events_dir):
        path = stack_file(events_dir, pid)
        with contextlib.suppress(OSError):
            if path.stat().st_size == 0 and not psutil.pid_exists(pid):
                path.unlink()


@dataclass(frozen=True)
class Frame:
    filename: str
    lineno: int
    function: str

    def where(self) -> str:
        return f"{self.function} ({Path(self.filename).name}:{self.lineno})"


def main_thread_frames(dump: str) -> list[Frame]:
    """The main thread's frames in a faulthandler dump, innermost first.

    faulthandler does not mark the main thread: it is the one whose outermost frame is not
    ``threading``'s ``_bootstrap`` (preferring the thread that handled the signal).
    """
    threads: list[tuple[bool, list[Frame]]] = []
    for line in dump.splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x")):
            threads.append((line.startswith("Current"), []))
        elif threads and (match := _FRAME.match(line)):
            frame = Frame(match["file"], int(match["line"]), match["function"])
            threads[-1][1].append(frame)
    mains = [(current, frames) for current, frames in threads if frames and not _worker(frames)]
    mains.sort(key=lambda item: not item[0])
    return mains[0][1] if mains else []


def _worker(frames: list[Frame]) -> bool:
    outer = frames[-1]
    return outer.function.startswith("_bootstrap") and Path(outer.filename).name == "threading.py"


def innermost_user_frame(frames: list[Frame]) -> Frame | None:
    """The innermost frame of user code (not torch, Lightning, chaoslight or the stdlib)."""
    return next((f for f in frames if not is_library(f.filename)), None)
