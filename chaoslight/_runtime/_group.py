"""A SIGTERM to a rank's whole process group, as SLURM delivers a preemption: the rank and
every process it started in its group (its DataLoader workers) get it at once.

The signal is sent from a short-lived process outside the group, as a scheduler's comes
from outside the job. That matters: torch's DataLoader workers treat a SIGTERM sent by
their own parent as the loader shutting them down and exit quietly (status 0), while
one sent by anyone else kills them (``killed by signal: Terminated``), which their
parent's SIGCHLD handler then raises as an error.

The group must be the rank's own. A World's rank leads its own (each slot starts in a
new session), so the signal reaches that rank and its children, never another rank, the
World's parent or its reaper. Elsewhere (``inject()`` inside pytest, a rank that a
launcher started in the launcher's group) the group holds processes that are not the
rank's: then only the rank and the processes it started are signalled, and the delivery
note says so.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from chaoslight._runtime._proc import descendants, exited, group_members

SEND_TIMEOUT_S = 10.0
SETTLE_S = 1.0  # at most this long for the signalled processes to die of it
# Run as ``python -S -c SENDER group PGID`` or ``python -S -c SENDER pids PID...``.
SENDER = """
import os, signal, sys
kill = os.killpg if sys.argv[1] == "group" else os.kill
for target in sys.argv[2:]:
    try:
        kill(int(target), signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
"""


@dataclass(frozen=True)
class Targets:
    """Who a group SIGTERM reaches: a process group by its id, or processes by pid."""

    group: int | None  # signalled as a group; None: ``pids`` one by one
    pids: tuple[int, ...]  # the rank and the processes it started, the rank first
    words: str  # for the delivery note: "and its process group (pgid 41: ...)"


def group_targets() -> Targets:
    """This rank's process group when the rank leads it and everything in it descends
    from the rank; else the rank and the processes it started (the group is narrowed)."""
    me = os.getpid()
    pgid = os.getpgid(0)
    own = (me, *(proc.pid for proc in descendants(me)))
    others = {proc.pid for proc in group_members(pgid)} - set(own)
    children = len(own) - 1
    started = f"{children} process{'es' if children != 1 else ''} it started"
    if pgid == me and not others:
        return Targets(pgid, own, f"and its process group (pgid {pgid}: the rank and {started})")
    why = "it does not lead it" if pgid != me else f"it holds {len(others)} other processes"
    return Targets(
        None,
        own,
        f"and the {started} (narrowed: its process group {pgid} is not the rank's own, {why})",
    )


def send_from_outside(targets: Targets) -> None:
    """SIGTERM to ``targets`` from a process in a session of its own; then wait (at most
    ``SETTLE_S``) until the rank's processes that the signal kills have died, as they do
    long before a rank on a real device reaches its next batch (a CPU step is so short
    that the rank would otherwise race its own workers' deaths)."""
    _send(targets)
    deadline = time.monotonic() + SETTLE_S
    for pid in targets.pids[1:]:
        if not ignores_sigterm(pid):
            exited(pid, max(0.0, deadline - time.monotonic()))  # never reaps: torch will


def ignores_sigterm(pid: int) -> bool:
    """Whether process ``pid`` ignores SIGTERM (Linux's ``SigIgn`` mask; elsewhere no)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("SigIgn:"):
                    return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def _send(targets: Targets) -> None:
    if targets.group is not None:
        argv = ["group", str(targets.group)]
    else:
        argv = ["pids", *map(str, targets.pids)]
    try:
        subprocess.run(
            [sys.executable, "-S", "-c", SENDER, *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # outside the group it signals
            timeout=SEND_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        # No interpreter to start: the signal still has to come, from here.
        if targets.group is not None:
            os.killpg(targets.group, signal.SIGTERM)
        else:
            for pid in targets.pids:
                os.kill(pid, signal.SIGTERM)
