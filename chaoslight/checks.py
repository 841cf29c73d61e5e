"""Built-in checks (``chaoslight.checks``): oracles that turn silent misbehaviour into failures.

    from chaoslight.checks import ReplicasInSync, ErrorsSurface
    with chaoslight.World(size=2) as world:
        outcome = world.run("train.py:main", schedule, checks=[ReplicasInSync(), ErrorsSurface()])

Each check works in one process (``inject(schedule, checks=[...])``) and across ranks;
names are stable for ``--check NAME``. See ``docs/checks.md``.
"""

from chaoslight._checks import (
    CHECKS,
    Check,
    Deterministic,
    DisjointShards,
    ErrorsSurface,
    Evidence,
    FiniteGrads,
    FiniteLoss,
    NoHang,
    RankView,
    ReplicasInSync,
    Violation,
    check_by_name,
    observe,
)
from chaoslight._checks._base import observer_class

__all__ = [
    "CHECKS",
    "Check",
    "Deterministic",
    "DisjointShards",
    "ErrorsSurface",
    "Evidence",
    "FiniteGrads",
    "FiniteLoss",
    "NoHang",
    "RankView",
    "ReplicasInSync",
    "Violation",
    "check_by_name",
    "observe",
    "observer_class",
]
