"""A synced ``self.log`` under a data-dependent condition: the ranks log different steps.

The bug: to keep the logs small, ``training_step`` logs the loss of "hard" batches only:
``if loss > HARD: self.log("hard_loss", loss, sync_dist=True)``. With ``sync_dist=True``
the log is a collective (an all-reduce across ranks), but whether a batch is hard is
decided by each rank on its own batch: at the first step where one rank's batch is hard
and the other's is not, one rank all-reduces alone while the other goes on to the next
collective (the gradient all-reduce), and the collectives pair up wrongly.

In production (NCCL): a hang at a data-dependent step, or a "mismatched collective"
error with ``TORCH_DISTRIBUTED_DEBUG=DETAIL``; it appears when the data or the seed
changes and never in a single-GPU debug run.

The fix (``train_fixed``): log on every step, on every rank: the fraction of hard
batches (``(loss > HARD).float()``) and the loss, both synced; filter in the dashboard.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]

HARD = 2.0


class Regressor(pl.LightningModule):
    """A one-layer regressor that reports hard batches."""

    def __init__(self, every_step: bool) -> None:
        super().__init__()
        self.every_step = every_step
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        if self.every_step:
            self.log("hard_fraction", (loss > HARD).float(), sync_dist=True)
            self.log("train_loss", loss, sync_dist=True)
        elif loss > HARD:  # the bug: a rank-local condition around a collective
            self.log("hard_loss", loss, sync_dist=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _run(every_step: bool) -> float:
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(48, 4, generator=generator)
    y = x.sum(1, keepdim=True) + torch.randn(48, 1, generator=generator)
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
    model = Regressor(every_step)
    trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=4))
    return float(model.layer.weight.sum())


def train_buggy() -> float:
    """Bug: a synced log only on the ranks whose batch is hard."""
    return _run(every_step=False)


def train_fixed() -> float:
    """Fixed: every rank logs at every step."""
    return _run(every_step=True)
