"""Planted bug that needs two faults on two ranks (survive search over OOMs).

Each rank degrades gracefully when its forward pass runs out of memory: it skips the
batch (a zero loss keeps DDP in step) and counts the skip. At the end of the epoch the
ranks compare notes, and the program asserts that at most one rank had to skip -- an
assumption that holds for any single OOM and breaks only when two ranks run out. The
minimal failing schedule is two faults on two ranks:

    oom@lightning.forward rank=0 step=0
    oom@lightning.forward rank=1 step=0

``train_fixed`` tolerates skips on any number of ranks.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from _common import fit

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl  # type: ignore[no-redef]


class Model(pl.LightningModule):
    def __init__(self, strict: bool) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.skipped = 0
        self.strict = strict

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        try:
            prediction = self(x)
        except torch.OutOfMemoryError:
            self.skipped += 1
            return sum(p.sum() for p in self.parameters()) * 0.0
        return torch.nn.functional.mse_loss(prediction, y)

    def on_train_end(self) -> None:
        counts: list[Any] = [None] * self.trainer.world_size
        if dist.is_available() and dist.is_initialized():
            dist.all_gather_object(counts, self.skipped)
        else:
            counts = [self.skipped]
        ranks_that_skipped = sum(1 for c in counts if c)
        if self.strict and ranks_that_skipped > 1:
            raise AssertionError(f"{ranks_that_skipped} ranks skipped batches: {counts}")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(strict: bool) -> None:
    fit(Model(strict))


def train() -> None:
    """The buggy program."""
    _fit(strict=True)


def train_fixed() -> None:
    """The fixed twin."""
    _fit(strict=False)
