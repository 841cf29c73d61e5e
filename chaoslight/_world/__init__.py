"""Layer 5, the World: a persistent pool of real DDP ranks (gloo, CPU).

``World`` runs a target in every rank of a gloo process group, example after example,
and classifies each as passed / failed / hung / crashed. It imports the runtime (each
rank runs ``inject`` and the runtime's ``Watchdog``), never the checks or the search:
checks reach it only through the runtime's check protocol.
"""

from __future__ import annotations

from chaoslight._report import ExceptionInfo, Outcome, RankResult
from chaoslight._world._pool import WORLD_TIMEOUT_S, World

__all__ = [
    "WORLD_TIMEOUT_S",
    "ExceptionInfo",
    "Outcome",
    "RankResult",
    "World",
]
