"""A per-rank memory limit: pure data, enforced by the runtime's memory ledger."""

from __future__ import annotations

from dataclasses import dataclass

from chaoslight._schedule._validate import check_bytes

DEFAULT_MIN_TRACKED_BYTES = 2**20


@dataclass(frozen=True)
class MemoryBudget:
    """A per-rank device-memory limit, so an allocation can run out on a CPU machine.

    Every rank gets ``limit_bytes``. Live ``Allocate`` holds count against it, and so does
    every tensor storage of at least ``min_tracked_bytes`` that the training thread makes
    while the budget is active, by any op (factories, ``torch.cat``, ``a @ b``,
    ``torch.tensor``, the backward's gradients), once per storage (views and in-place ops
    add nothing) and while it lives. Going over raises the simulated CUDA OOM on that rank,
    naming the rank, step, the user's line, the request, what is used and the limit.
    ``min_tracked_bytes`` keeps small tensors out of the count (and cheaper to watch).
    """

    limit_bytes: int
    min_tracked_bytes: int = DEFAULT_MIN_TRACKED_BYTES

    def __post_init__(self) -> None:
        check_bytes("limit_bytes", self.limit_bytes)
        check_bytes("min_tracked_bytes", self.min_tracked_bytes)
