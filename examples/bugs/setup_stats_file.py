"""Rank 0 writes normalisation statistics with ``torch.save`` in ``setup``; every rank
``torch.load``s them right away, with no barrier in between.

The bug: a DataModule computes the feature mean and standard deviation once, on rank 0
(``if self.trainer.is_global_zero:``), saves them to ``stats.pt`` and every rank loads
the file a moment later, after building its own index of the data (~0.2 s here, a sleep
stands for it). Nothing orders rank 0's write before the other ranks' read: it works
while rank 0 is faster than the others' indexing.

In production: a ``FileNotFoundError`` (or ``PytorchStreamReader failed reading zip
archive`` from a half-written file) on a non-zero rank, at start-up, a few times a week,
whenever rank 0's node is slow (a cold file system, a busy host); the other ranks then
wait at the next collective until NCCL's timeout. Worse, on a re-run in the same
directory a stale ``stats.pt`` from the last run is loaded silently.

The fix (``train_fixed``): write the file in ``prepare_data`` (Lightning runs it on
local rank 0 and then barriers every rank) and load it in ``setup``.
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]

STATS = "stats.pt"
INDEX_SECONDS = 0.2  # each rank's own start-up work before it loads the statistics


def _raw() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = 3.0 + 2.0 * torch.randn(32, 4, generator=generator)
    return x, x.sum(1, keepdim=True)


def _write_stats() -> None:
    x, _ = _raw()
    torch.save({"mean": x.mean(0), "std": x.std(0)}, STATS)


class StatsData(pl.LightningDataModule):
    """Standardised features; the statistics are computed once and shared by a file."""

    def __init__(self, in_prepare: bool) -> None:
        super().__init__()
        self.in_prepare = in_prepare
        self.data: TensorDataset | None = None

    def prepare_data(self) -> None:
        if self.in_prepare:
            _write_stats()  # local rank 0 only; Lightning barriers every rank after it

    def setup(self, stage: str) -> None:
        if not self.in_prepare and self.trainer is not None and self.trainer.is_global_zero:
            _write_stats()  # the bug: no barrier between this write and the loads below
        time.sleep(INDEX_SECONDS)  # stands for building this rank's index of the data
        stats = torch.load(STATS)
        x, y = _raw()
        self.data = TensorDataset((x - stats["mean"]) / stats["std"], y)

    def train_dataloader(self) -> DataLoader:
        assert self.data is not None
        return DataLoader(self.data, batch_size=4)


class Regressor(pl.LightningModule):
    """A one-layer regressor."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _run(in_prepare: bool) -> float:
    pl.seed_everything(0, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Regressor()
    trainer.fit(model, datamodule=StatsData(in_prepare))
    return float(model.layer.weight.sum())


def train_buggy() -> float:
    """Bug: rank 0 writes ``stats.pt`` in ``setup``, the others read it with no barrier."""
    return _run(in_prepare=False)


def train_fixed() -> float:
    """Fixed: the file is written in ``prepare_data``, which Lightning barriers."""
    return _run(in_prepare=True)
