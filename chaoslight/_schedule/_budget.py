"""A per-rank memory limit: pure data, enforced by the runtime's memory ledger."""

from __future__ import annotations

from dataclasses import dataclass

from chaoslight._schedule._validate import check_bytes

DEFAULT_MIN_TRACKED_BYTES = 2**20


@dataclass(frozen=True)
class MemoryBudget:
    """A per-rank device-memory limit, so an allocation can run out on a CPU machine.

    Every rank gets ``limit_bytes``. Live ``Allocate`` holds count against it, and so do
    tensors of at least ``min_tracked_bytes`` made by torch's factory functions
    (``empty``, ``zeros``, ``ones``, ``rand``, ``randn``, ``full`` and their ``_like``
    forms) while they live. Going over raises the simulated CUDA OOM on that rank.
    """

    limit_bytes: int
    min_tracked_bytes: int = DEFAULT_MIN_TRACKED_BYTES

    def __post_init__(self) -> None:
        check_bytes("limit_bytes", self.limit_bytes)
        check_bytes("min_tracked_bytes", self.min_tracked_bytes)
