"""How severe a fault is: what a correct program can be asked to do under it (the fault
classes of ``docs/explanation/oracle.md``). The oracle judges by it; the known-issue
matcher reads it to tell a run where only a preemption struck from one where more did."""

from __future__ import annotations

from chaoslight._schedule import Fault, ReorderReduction

BENIGN, HARD, DESYNC = "benign", "hard", "desync"
SEVERITY = (BENIGN, HARD, DESYNC)
HARD_KINDS = frozenset({"oom", "raise", "crash", "allocate", "preempt"})
DESYNC_KINDS = frozenset({"drop_sync", "corrupt"})


def fault_class(fault: Fault) -> str:
    """benign, hard or desync: what a correct program can be asked to do under it."""
    if isinstance(fault, ReorderReduction):
        return BENIGN if fault.rank is None else DESYNC  # one rank alone: a different sum
    if fault.kind in DESYNC_KINDS:
        return DESYNC
    return HARD if fault.kind in HARD_KINDS else BENIGN
