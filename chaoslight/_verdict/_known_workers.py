"""A SIGTERM to the whole process group, as SLURM sends it: the DataLoader workers die of it.

torch's DataLoader workers install a C handler for SIGTERM that dies of it unless their
own parent sent it; the rank's SIGCHLD handler then raises ``DataLoader worker (pid N)
is killed by signal: Terminated`` at the next bytecode its main thread runs, long before
the batch ends. A graceful stop on SIGTERM (Lightning's ``SIGTERMException`` at the next
batch, or the program's own flag, checkpoint and exit) never comes: the rank fails with
the loader's error instead. A program shields its workers with ``worker_init_fn`` (they
ignore SIGTERM; the loader still stops them itself at the end).

When Lightning's own handler took the SIGTERM, every program with worker processes
fails this way: that is the known issue (reported apart). When the program's own handler
took it, the program's emergency stop is lost: its own bug, with the usual cause said.
"""

from __future__ import annotations

import re

from chaoslight._report import FAILED, Outcome, RankResult
from chaoslight._runtime import read_fault
from chaoslight._verdict._known_frames import collective_ends
from chaoslight._verdict._known_issue import NOTHING, Claimed
from chaoslight._verdict._preemption import Delivery

# torch's words for a worker that a signal ended (the SIGCHLD handler's), or that the
# main process found gone (its ``_try_get_data``).
WORKER_DEATH = re.compile(
    r"DataLoader worker \(pid(?:\(s\))? [^)]*\) "
    r"(?:is killed by signal: Terminated|exited unexpectedly)"
)
WORKERS_CAUSE = (
    "the SIGTERM reached the DataLoader workers too (a scheduler signals the whole "
    "process group): they died of it, and the loader raised before the graceful stop "
    "(the emergency checkpoint) ran; make the workers ignore SIGTERM in worker_init_fn "
    "(signal.signal(signal.SIGTERM, signal.SIG_IGN))"
)


def to_group(delivery: Delivery) -> bool:
    """Whether the notice went to the rank's process group (its workers with it)."""
    notice = read_fault(delivery.fault)
    return notice is not None and notice.reaches_group()


def workers_died(result: RankResult) -> bool:
    """The rank failed with torch's error for DataLoader workers a signal ended (in its
    exception or one it was raised while handling)."""
    exc = result.exception
    if result.status != FAILED or exc is None:
        return False
    return WORKER_DEATH.search(f"{exc.traceback}\n{exc}") is not None


def workers_killed_before_stop(outcome: Outcome, taken: list[Delivery]) -> Claimed:
    """Lightning's handler took a SIGTERM sent to the rank's process group, and a rank it
    reached failed with torch's error for its DataLoader workers, which the same SIGTERM
    killed: those ranks' ends are the issue's, and so are their peers' ends in a
    collective (released, or left waiting, by the rank that left)."""
    reached = {d.rank for d in taken if to_group(d)}
    died = frozenset(r.rank for r in outcome.ranks if r.rank in reached and workers_died(r))
    return Claimed(died | collective_ends(outcome)) if died else NOTHING


def workers_cause(outcome: Outcome, delivered: list[Delivery]) -> str:
    """``Usual cause: ...`` for a preemption finding in which a rank the group notice
    reached failed because its DataLoader workers died of it; else ""."""
    reached = {d.rank for d in delivered if to_group(d)}
    if any(r.rank in reached and workers_died(r) for r in outcome.ranks):
        return f". Usual cause: {WORKERS_CAUSE}"
    return ""
