"""Targets for the wavefront tests: 2-rank programs whose collectives part ways, and twins
in which one rank is only late (a straggler, never a hang).

Loaded by World workers as ``tests/wavefront_targets.py:<name>``; ``helpers`` is importable
because a path target's folder goes on ``sys.path``.
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch
import torch.distributed as dist
from helpers import tiny_loader, tiny_model_class, tiny_trainer

MAX_STEPS = 4
LATE_S = 2.0  # how long a late rank keeps the other waiting


def _rank() -> int:
    return int(os.environ["RANK"])


def _fit(model: Any = None) -> Any:
    model = tiny_model_class()() if model is None else model
    trainer = tiny_trainer(
        max_steps=MAX_STEPS, devices=int(os.environ["WORLD_SIZE"]), strategy="ddp"
    )
    trainer.fit(model, tiny_loader())
    return model


class ExportOnRankZero(tiny_model_class()):  # type: ignore[misc]
    """Bug: rank 0 exports after batch 1 behind a barrier no other rank reaches."""

    exporter = 0

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.trainer.global_rank == self.exporter and batch_idx == 1:
            self._export()

    def _export(self) -> None:
        dist.barrier()


def export_on_rank_0() -> None:
    """A barrier on rank 0 only, inside fit: rank 1 waits in Lightning's broadcast."""
    _fit(ExportOnRankZero())


def export_on_rank_1() -> None:
    """The same bug on rank 1: rank 0 waits in Lightning's broadcast."""

    class ExportOnRankOne(ExportOnRankZero):
        exporter = 1

    _fit(ExportOnRankOne())


def barrier_against_all_reduce() -> None:
    """No Lightning: rank 0 all-reduces where rank 1 waits at a barrier."""
    tensor = torch.ones(4)
    dist.all_reduce(tensor)
    if _rank() == 0:
        dist.all_reduce(tensor)
    else:
        dist.barrier()


def extra_barrier_on_rank_1() -> str:
    """Both ranks fit; then rank 1 alone waits at a barrier while rank 0 returns."""
    _fit()
    if _rank() == 1:
        dist.barrier()
    return "done"


class LateRankOne(tiny_model_class()):  # type: ignore[misc]
    """Rank 1 spends ``LATE_S`` in user code after batch 1, outside every collective."""

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.trainer.global_rank == 1 and batch_idx == 1:
            time.sleep(LATE_S)


def late_rank_1() -> None:
    """Correct: rank 0 waits in the next collective while rank 1 is busy."""
    _fit(LateRankOne())


def broadcast_then_reduce() -> list[float]:
    """Correct, no Lightning: a broadcast from rank 0, then an all-reduce."""
    tensor = torch.full((4,), float(_rank() + 1))
    dist.broadcast(tensor, src=0)
    dist.all_reduce(tensor)
    dist.barrier()
    return tensor.tolist()  # type: ignore[no-any-return]
