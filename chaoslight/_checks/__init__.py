"""Built-in checks: oracles that turn silent misbehaviour into failures.

Pass them as ``inject(schedule, checks=[...])``, ``world.run(target, schedule,
checks=[...])`` or ``--check NAME`` on the command line (names are stable).
"""

from __future__ import annotations

from typing import Any

from chaoslight._checks._base import Check, Evidence, RankView, Violation, cannot_judge, observe
from chaoslight._checks._behaviour import ErrorsSurface, NoHang
from chaoslight._checks._buffers import BuffersInSync
from chaoslight._checks._exits import ExitStatus
from chaoslight._checks._facts import FrameworkFacts
from chaoslight._checks._finite import FiniteGrads, FiniteLoss
from chaoslight._checks._invariants import ReplicasInSync
from chaoslight._checks._learned import LearnedInvariants
from chaoslight._checks._order import DataOrder
from chaoslight._checks._reruns import Deterministic, ResumeEquivalence
from chaoslight._checks._restart import RestartEquivalence
from chaoslight._checks._shards import DisjointShards
from chaoslight._runtime._protocol import check_from_name, register_check

CHECKS: dict[str, type[Check]] = {
    cls.name: cls
    for cls in (
        ReplicasInSync,
        NoHang,
        FiniteLoss,
        FiniteGrads,
        DisjointShards,
        ErrorsSurface,
        Deterministic,
        ResumeEquivalence,
        RestartEquivalence,
        ExitStatus,
        BuffersInSync,
        DataOrder,
        LearnedInvariants,
        FrameworkFacts,
    )
}

__all__ = [
    "CHECKS",
    "BuffersInSync",
    "Check",
    "DataOrder",
    "Deterministic",
    "DisjointShards",
    "ErrorsSurface",
    "Evidence",
    "ExitStatus",
    "FiniteGrads",
    "FiniteLoss",
    "FrameworkFacts",
    "LearnedInvariants",
    "NoHang",
    "RankView",
    "ReplicasInSync",
    "RestartEquivalence",
    "ResumeEquivalence",
    "Violation",
    "cannot_judge",
    "check_by_name",
    "observe",
]


for _name, _cls in CHECKS.items():
    register_check(_name, _cls)


def check_by_name(name: str, **params: Any) -> Check:
    """Build a check from its stable name (``--check replicas-in-sync``) and parameters."""
    check: Check = check_from_name(name, **params)
    return check
