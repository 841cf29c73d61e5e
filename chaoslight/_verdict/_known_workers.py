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
from typing import Any

from chaoslight._report import FAILED
from chaoslight._runtime import FIRED
from chaoslight._schedule import InvalidSchedule, fault_from_text
from chaoslight._verdict._preemption import Delivery
from chaoslight._verdict._severity import BENIGN, fault_class

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


def more_than_a_preemption(outcome: Any) -> bool:
    """A fault other than a preemption that is not benign fired: the failure may be its."""
    for event in outcome.events:
        if event.kind != FIRED:
            continue
        try:
            fault = fault_from_text(event.fault)
        except InvalidSchedule:
            return True  # a fault this version cannot read: do not call the run Lightning's
        budget = getattr(outcome.schedule, "memory_budget", None)
        if not fault.acts_later and fault_class(fault, budget) != BENIGN:
            return True
    return False


def to_group(delivery: Delivery) -> bool:
    """Whether the notice went to the rank's process group (its workers with it)."""
    try:
        return fault_from_text(delivery.fault).params().get("group") is True
    except InvalidSchedule:
        return False


def workers_died(result: Any) -> bool:
    """The rank failed with torch's error for DataLoader workers a signal ended (in its
    exception or one it was raised while handling)."""
    exc = result.exception
    if result.status != FAILED or exc is None:
        return False
    return WORKER_DEATH.search(f"{exc.traceback}\n{exc}") is not None


def workers_killed_before_stop(outcome: Any, taken: list[Delivery]) -> bool:
    """Lightning's handler took a SIGTERM sent to the rank's process group, nothing but
    preemptions struck, and a rank it reached failed with torch's error for its DataLoader
    workers, which the same SIGTERM killed."""
    if not taken or more_than_a_preemption(outcome):
        return False
    reached = {d.rank for d in taken if to_group(d)}
    return any(r.rank in reached and workers_died(r) for r in outcome.ranks)


def workers_cause(outcome: Any, delivered: list[Delivery]) -> str:
    """``Usual cause: ...`` for a preemption finding in which a rank the group notice
    reached failed because its DataLoader workers died of it; else ""."""
    reached = {d.rank for d in delivered if to_group(d)}
    if any(r.rank in reached and workers_died(r) for r in outcome.ranks):
        return f". Usual cause: {WORKERS_CAUSE}"
    return ""
