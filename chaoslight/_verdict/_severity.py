"""How severe a fault is: what a correct program can be asked to do under it (the fault
classes of ``docs/explanation/oracle.md``). Each kind says it (``Fault.severity``, and
``Fault.fault_class()`` where a parameter changes it); the oracle judges by it, and the
known-issue matcher reads it to tell a run where only a preemption struck from one where
more did."""

from __future__ import annotations

from typing import Any

from chaoslight._schedule import Fault, Severity

BENIGN, HARD, DESYNC = Severity.BENIGN, Severity.HARD, Severity.DESYNC
SEVERITY = tuple(Severity)  # mildest first: a run is judged by its worst fault


def fault_class(fault: Fault, budget: Any = None) -> Severity:
    """benign, hard or desync: what a correct program can be asked to do under it, in a
    run whose schedule has this memory ``budget`` (None: no budget)."""
    return fault.fault_class(budget)
