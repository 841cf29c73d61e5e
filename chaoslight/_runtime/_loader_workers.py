"""The stacks of the DataLoader workers a hung rank waits on: a hang's evidence.

A rank whose main thread waits for a batch waits on its DataLoader's worker processes,
and its own stack says nothing of why. So a process chaoslight runs as a rank (a World's)
has faulthandler answer ``WORKER_SIGNAL`` by writing the stack of the thread it lands on
to a file of its own (``arm``); the workers it forks inherit both, and
faulthandler writes from the signal handler, in C, so a worker that never got to run a
line of Python still answers. When the watchdog reports a hang, ``worker_stacks`` asks
each worker of the loader the main thread waits on, and returns their stacks, each line
behind ``PREFIX`` so that no reader of the rank's own dump takes them for its threads.

A worker whose stack ends in ``os.fork()`` (``multiprocessing/popen_fork.py``) never left
the fork: it is stuck in the interpreter's or a library's at-fork handling, where no line
of the program runs (CPython up to 3.11.9 can deadlock there: ``_known_fork.py``). Its
block says so: ``STUCK_IN_FORK``.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import platform
import signal
import tempfile
import time
from typing import IO, Any

from chaoslight._runtime._frames import current_frames

_DATALOADER = os.path.join("torch", "utils", "data", "dataloader.py")
_POPEN_FORK = os.path.join("multiprocessing", "popen_fork.py")
PREFIX = "  | "
STUCK_IN_FORK = "is stuck in os.fork()"
ANSWER_S = 1.0  # how long a worker has to write its stack
FORK_SETTLE_S = 0.5  # a fork done is done in milliseconds


def _worker_signal() -> int | None:
    """A real-time signal below the stack dumps' (``_dumps.DUMP_SIGNAL``); None without."""
    top = getattr(signal, "SIGRTMAX", None)
    return int(top) - 4 if top is not None else None


WORKER_SIGNAL = _worker_signal()

_answers: IO[str] | None = None  # where this process and the workers it forks write


def arm() -> None:
    """In a rank process: have faulthandler answer ``WORKER_SIGNAL`` with the stacks, in
    this process and every process it forks from now on. Again before each example: a
    Lightning fit, tearing down, sets every signal's handler back to what Python knew
    (for this one, the default: death), and a worker forked then could not answer."""
    global _answers
    if WORKER_SIGNAL is None:
        return
    with contextlib.suppress(OSError, RuntimeError, ValueError):
        if _answers is None:
            _answers = tempfile.TemporaryFile("w+", prefix="chaoslight-workers-")  # noqa: SIM115
        # faulthandler skips installing a handler it believes it still has: drop it first.
        faulthandler.unregister(WORKER_SIGNAL)
        # The thread the signal lands on only: a child stuck in the fork still lists the
        # parent's thread states, one of them half made (whose making held the lock).
        faulthandler.register(WORKER_SIGNAL, file=_answers, all_threads=False, chain=False)


def worker_stacks(thread_id: int | None) -> str:
    """The stacks of the workers of the DataLoader thread ``thread_id`` waits on, one block
    each; '' when it waits on none, or nothing was armed."""
    answers = _answers
    if answers is None or WORKER_SIGNAL is None:
        return ""
    pids = loader_workers(current_frames().get(thread_id or 0))
    return "".join(_block(pid, _ask_again_if_forking(answers, pid)) for pid in pids)


def loader_workers(frame: Any) -> list[int]:
    """The worker pids of the multi-process DataLoader iterator whose method ``frame`` (a
    thread's innermost frame) or a frame outside it runs."""
    while frame is not None:
        if frame.f_code.co_filename.endswith(_DATALOADER):
            workers = getattr(frame.f_locals.get("self"), "_workers", None)
            if isinstance(workers, list):
                return [pid for w in workers if isinstance(pid := getattr(w, "pid", None), int)]
        frame = frame.f_back
    return []


def stuck_in_fork(dump: str) -> bool:
    """Whether the innermost frame of the thread that wrote a faulthandler dump is the
    os.fork() of multiprocessing's fork start: the process never returned from the fork
    into its own code."""
    current = False
    for line in dump.splitlines():
        if line.startswith(("Current thread 0x", "Stack (most recent call first)")):
            current = True
        elif current and line.strip().startswith("File "):
            return _POPEN_FORK in line and "in _launch" in line
    return False


def _ask_again_if_forking(answers: IO[str], pid: int) -> str:
    """A worker's stack; one that ends in the fork is asked again ``FORK_SETTLE_S`` later
    (a child just forked is there for a few milliseconds): stuck only if it still is."""
    dump = _ask(answers, pid)
    if stuck_in_fork(dump):
        time.sleep(FORK_SETTLE_S)
        dump = _ask(answers, pid)
    return dump


def _ask(answers: IO[str], pid: int) -> str:
    """Signal ``pid`` and read what it appends to the shared file (one worker at a time)."""
    assert WORKER_SIGNAL is not None
    if not _answers_signal(pid, WORKER_SIGNAL):
        return ""  # gone, or forked while the handler was off: the signal would kill it
    answers.flush()
    start = os.fstat(answers.fileno()).st_size
    try:
        os.kill(pid, WORKER_SIGNAL)
    except (ProcessLookupError, PermissionError):
        return ""
    deadline, size, steady = time.monotonic() + ANSWER_S, start, 0
    while time.monotonic() < deadline and steady < 3:  # written whole: then it stops growing
        time.sleep(0.02)
        now = os.fstat(answers.fileno()).st_size
        steady = steady + 1 if now == size and now > start else 0
        size = now
    return os.pread(answers.fileno(), max(size - start, 0), start).decode("utf-8", "replace")


def _answers_signal(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` now (Linux's ``SigCgt``)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError, IndexError):
        return False
    return False


def _block(pid: int, dump: str) -> str:
    """One worker's stack, each line behind ``PREFIX``, under a line that says what it is."""
    if not dump:
        return (
            f"\nDataLoader worker (pid {pid}) of the loader the main thread waits on gave no "
            "stack (gone, or forked while its handler was off)\n"
        )
    where = (
        f"{STUCK_IN_FORK} ({platform.python_implementation()} {platform.python_version()}): "
        "it never returned into its own code"
        if stuck_in_fork(dump)
        else "its stack"
    )
    lines = "".join(f"{PREFIX}{line}\n" for line in dump.rstrip().splitlines())
    return (
        f"\nDataLoader worker (pid {pid}) of the loader the main thread waits on {where}:\n{lines}"
    )


def disarm() -> None:
    """Undo ``arm`` (a test's process; a rank keeps it for life)."""
    global _answers
    if _answers is None or WORKER_SIGNAL is None:
        return
    faulthandler.unregister(WORKER_SIGNAL)
    _answers.close()
    _answers = None
