"""Process-tree helpers: nothing chaoslight starts may outlive it.

Launchers (torchrun, Lightning's ddp launcher) may put ranks in sessions of their own,
so killing a process group is not enough: the whole tree is found through ``/proc``
and killed with SIGKILL, since a stuck gloo rank ignores SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path


def _parent_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: the ppid follows the last ')'.
    return int(stat.rsplit(")", 1)[1].split()[1])


def descendants(pid: int) -> list[int]:
    """Every living process below ``pid`` (children, grandchildren, ...)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            parent = _parent_of(int(entry.name))
            if parent is not None:
                parents[int(entry.name)] = parent
    found: list[int] = []
    frontier = [pid]
    while frontier:
        current = frontier.pop()
        children = [child for child, parent in parents.items() if parent == current]
        found += children
        frontier += children
    return found


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and everything below it; missing processes are ignored."""
    for target in [*descendants(pid), pid]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(target, signal.SIGKILL)
