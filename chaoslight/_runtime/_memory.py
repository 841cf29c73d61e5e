"""Simulated device memory: the CUDA-shaped OOM, Allocate holds, and a per-rank budget."""

from __future__ import annotations

import threading
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from chaoslight._runtime._deliberate import mark
from chaoslight._schedule import SIMULATED_OOM_MARK
from chaoslight._schedule._budget import MemoryBudget


def format_bytes(nbytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(nbytes) < 1024 or unit == "TiB":
            return f"{nbytes:.2f} {unit}" if unit != "B" else f"{int(nbytes)} bytes"
        nbytes /= 1024
    raise AssertionError("unreachable")


def simulated_oom(
    nbytes: int,
    rank: int,
    cause: str,
    used: int = 0,
    limit: int | None = None,
    device: Any = None,
) -> Any:
    """A ``torch.OutOfMemoryError`` whose message has the shape of a real CUDA OOM, marked
    deliberate: every simulated OOM (a fault's, a deferred one, a budget's) is made here.

    Its numbers are true of the device it names: under a budget (``limit``), the budget's
    (``used`` of ``limit``); on a CUDA ``device`` (None: the current CUDA device, where
    this process uses CUDA), the card's own total and free memory and what PyTorch holds
    of it (``torch.cuda.mem_get_info``); elsewhere a device of rank ``rank`` with less
    free memory than the request."""
    import torch

    card = None if limit is not None else _cuda_memory(device)
    if limit is not None:
        index, capacity, free, reserved = rank, limit, max(limit - used, 0), used
    elif card is not None:
        index, capacity, free, used, reserved = card
    else:  # no device to ask: one on which the request cannot fit
        free = nbytes // 2
        index, capacity, reserved = rank, used + free, used
    message = (
        f"CUDA out of memory. Tried to allocate {format_bytes(nbytes)}. GPU {index} has a "
        f"total capacity of {format_bytes(capacity)} of which {format_bytes(free)} is free. Of "
        f"the allocated memory {format_bytes(used)} is allocated by PyTorch, and "
        f"{format_bytes(max(reserved - used, 0))} is reserved by PyTorch but unallocated. If "
        "reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation. "
        f"[{SIMULATED_OOM_MARK}: {cause}]"
    )
    return mark(torch.OutOfMemoryError(message))


def _cuda_memory(device: Any) -> tuple[int, int, int, int, int] | None:
    """(index, total, free, allocated, reserved) of the CUDA device ``device`` (None: the
    current one, if this process has initialised CUDA), or None when it is no CUDA device."""
    import torch

    try:
        if device is None:
            if not torch.cuda.is_initialized():
                return None  # asking would initialise CUDA in a process that never used it
            device = torch.device("cuda", torch.cuda.current_device())
        device = torch.device(device)
        if device.type != "cuda":
            return None
        index = torch.cuda.current_device() if device.index is None else device.index
        free, total = torch.cuda.mem_get_info(index)
        allocated = torch.cuda.memory_allocated(index)
        reserved = torch.cuda.memory_reserved(index)
    except (RuntimeError, AssertionError, ValueError):  # no driver, no such device
        return None
    return index, int(total), int(free), int(allocated), int(reserved)


@dataclass(eq=False)  # compared by identity: comparing tensors field by field is an error
class Hold:
    tensor: Any
    nbytes: int
    release_step: int | None  # None: held until injection ends
    fault: str


class MemoryLedger:
    """Counts what lives on this rank's simulated device against an optional budget: the
    ``Allocate`` holds, and the storages ``_dispatch_budget`` sees the user's code make;
    or, where a CPU allocator counts the allocations (``_cpu_budget``, ``allocator``), the
    holds beside what it counts."""

    def __init__(self, budget: MemoryBudget | None, rank_of: Any) -> None:
        self.budget = budget
        self.used = 0
        self.holds: list[Hold] = []
        # On a CUDA device the caching allocator enforces the budget (``_allocator_budget``):
        # the ledger still counts the holds, and refuses nothing itself.
        self.enforced_elsewhere = False
        self.allocator: Any = None  # a CpuCounter, told of the holds (``set_extra``)
        self._rank_of = rank_of
        # Tensors are freed (and give their bytes back) in whichever thread drops them.
        self._lock = threading.RLock()

    def reserve(self, nbytes: int) -> tuple[int, int] | None:
        """Count ``nbytes`` as used; if that would go over, count nothing and return the
        ``(used, limit)`` that refused it."""
        with self._lock:
            limit = None if self.budget is None else self.budget.limit_bytes
            counted = self.used + (self.allocator.used() if self.allocator is not None else 0)
            if limit is None or self.enforced_elsewhere or counted + nbytes <= limit:
                self._count(nbytes)
                return None
            return counted, limit

    def charge(self, nbytes: int, cause: str) -> None:
        """Count ``nbytes`` as used, or raise the simulated OOM if it would go over."""
        refused = self.reserve(nbytes)
        if refused is not None:
            raise simulated_oom(nbytes, self._rank_of(), cause, *refused)

    def give_back(self, nbytes: int) -> None:
        with self._lock:
            self._count(-nbytes)

    def _count(self, nbytes: int) -> None:
        self.used += nbytes
        if self.allocator is not None:
            self.allocator.set_extra(self.used)

    def allocate(self, nbytes: int, device: Any, release_step: int | None, fault: str) -> None:
        import torch

        self.charge(nbytes, fault)
        # The hold is counted here: the allocator must not count its tensor a second time.
        quiet = self.allocator.paused() if self.allocator is not None else nullcontext()
        try:
            with quiet:
                tensor = torch.ones(nbytes, dtype=torch.uint8, device=device)  # every page
        except BaseException:
            self.give_back(nbytes)
            raise
        with self._lock:
            self.holds.append(Hold(tensor, nbytes, release_step, fault))

    def release_due(self, step: int | None) -> list[Hold]:
        if not self.holds or step is None:
            return []
        with self._lock:
            due = [h for h in self.holds if h.release_step is not None and h.release_step <= step]
            self._release(due)
        return due

    def release_all(self) -> None:
        with self._lock:
            self._release(list(self.holds))

    def _release(self, holds: list[Hold]) -> None:
        """Drop these holds (by identity: two holds of one size are still two holds)."""
        gone = {id(hold) for hold in holds}
        self.holds = [hold for hold in self.holds if id(hold) not in gone]
        for hold in holds:
            self.give_back(hold.nbytes)
            hold.tensor = None
