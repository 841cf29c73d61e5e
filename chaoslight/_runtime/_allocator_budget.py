"""A memory budget on a CUDA device: the caching allocator's own per-process limit.

On a CUDA device every byte goes through PyTorch's caching allocator, which can refuse
what would take this process past a fraction of the card
(``torch.cuda.set_per_process_memory_fraction``). Under a budget, once the rank is known
to train on a CUDA device (a Trainer's root device; a loop's first optimizer step), that
limit *is* the budget: the OOM is the allocator's own, raised at the allocation that goes
over, and memory the allocator reserved but has not handed out counts, as it does on a
real card of that size. The CPU's way (``_dispatch_budget``: a Python dispatch mode that
sees every op) is then taken off the thread, so a budget costs the GPU nothing per op.

chaoslight adds what the allocator cannot know: the rank, the step and the program's
line, appended to the OOM's message when it leaves ``inject`` (an OOM the program
catches keeps the allocator's words). The fraction the process had is put back when the
injection ends.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from chaoslight._runtime._frames import user_frame
from chaoslight._runtime._memory import format_bytes
from chaoslight._schedule._budget import MemoryBudget

# The words that say a CUDA OOM was the budget's: the CPU budget's simulated OOM carries
# them too (``_dispatch_budget``), so a report reads both alike.
BUDGET_WORDS = "MemoryBudget on rank"


@dataclass
class AllocatorLimit:
    """The per-process limit set on one CUDA device for a budget, and what it replaced."""

    index: int  # the CUDA device
    total: int  # its memory, in bytes
    limit: int  # the budget's bytes (the fraction set is limit / total, at most 1)
    before: float  # the fraction the process had

    @classmethod
    def engage(cls, device: Any, budget: MemoryBudget) -> AllocatorLimit | None:
        """Set the budget as the allocator's limit on ``device``; None unless it is CUDA."""
        import torch

        if getattr(device, "type", None) != "cuda":
            return None
        index = device.index if device.index is not None else torch.cuda.current_device()
        total = int(torch.cuda.get_device_properties(index).total_memory)
        before = float(torch.cuda.get_per_process_memory_fraction(index))
        torch.cuda.set_per_process_memory_fraction(min(1.0, budget.limit_bytes / total), index)
        return cls(index, total, budget.limit_bytes, before)

    def release(self) -> None:
        import torch

        torch.cuda.set_per_process_memory_fraction(self.before, self.index)

    def explain(self, error: BaseException, rank: int, step: int | None) -> None:
        """Append the budget's rank, step and the program's line to an allocator OOM in
        ``error``'s chain (once; an OOM that is not the allocator's is left alone)."""
        oom = _allocator_oom(error)
        if oom is None or BUDGET_WORDS in str(oom):
            return
        when = "before the first training step" if step is None else f"step {step}"
        words = (
            f" [{BUDGET_WORDS} {rank}, {when}, at {_program_line(oom)}: the caching "
            f"allocator's limit on GPU {self.index} is the budget's "
            f"{format_bytes(self.limit)} of its {format_bytes(self.total)}]"
        )
        first = str(oom.args[0]) if oom.args else ""
        oom.args = (first + words, *oom.args[1:])


def cuda_ready() -> bool:
    """Whether this process has initialised CUDA (asking a card before would do it)."""
    torch = sys.modules.get("torch")
    return torch is not None and bool(torch.cuda.is_initialized())


def _allocator_oom(error: BaseException) -> BaseException | None:
    """The ``torch.OutOfMemoryError`` in ``error``'s chain (raised from, or during), if any."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, torch.OutOfMemoryError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _program_line(error: BaseException) -> str:
    """``file:line in function`` of the innermost program frame the OOM came through."""
    traceback = error.__traceback__
    innermost = None
    while traceback is not None:
        innermost, traceback = traceback.tb_frame, traceback.tb_next
    frame = user_frame(innermost)
    if frame is None:
        return "no frame outside torch, Lightning and chaoslight"
    return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"


class TrainingDevice:
    """The device a rank trains on, learnt once (a Trainer's root device; a loop's first
    optimizer step). Under a budget on a CUDA device, the caching allocator's limit
    enforces the budget from then on, and ``stop_counting`` (set by ``inject``) takes the
    CPU's dispatch mode off: no mode watches the ops."""

    def __init__(self, ledger: Any) -> None:
        self.ledger = ledger
        self.known = False
        self.waiting: Any = None  # a CUDA device named before CUDA was initialised
        self.limit: AllocatorLimit | None = None
        self.stop_counting: Any = None

    def tell(self, device: Any) -> None:
        """The rank trains on ``device``."""
        if device is None or self.known:
            return
        budget = self.ledger.budget
        if budget is not None and getattr(device, "type", None) == "cuda" and not cuda_ready():
            # Asking the card now would initialise CUDA in this process, which a parent
            # that forks its ranks (ddp_fork) must not: decide when the step moves.
            self.waiting = device
            return
        self.known, self.waiting = True, None
        if budget is None:
            return
        self.limit = AllocatorLimit.engage(device, budget)
        if self.limit is not None:
            self.ledger.enforced_elsewhere = True
            if self.stop_counting is not None:
                self.stop_counting()

    def settle(self) -> None:
        """Engage the device named before CUDA was ready, if it is now."""
        if self.waiting is not None:
            self.tell(self.waiting)

    def release(self) -> None:
        if self.limit is not None:
            self.limit.release()
