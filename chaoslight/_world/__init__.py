"""Multi-rank chaos on CPU: a persistent pool of DDP ranks and a hang watchdog.

``World`` runs a target in every rank of a gloo process group, example after example;
``Watchdog`` notices when no injection site has been reached for a while, in any process.
This package may import the runtime; nothing below it imports this package.
"""

from __future__ import annotations

from chaoslight._world._outcome import ExceptionInfo, Outcome, RankResult
from chaoslight._world._pool import World
from chaoslight._world._watchdog import HangDetected, HangReport, Position, Watchdog

__all__ = [
    "ExceptionInfo",
    "HangDetected",
    "HangReport",
    "Outcome",
    "Position",
    "RankResult",
    "Watchdog",
    "World",
]
