"""Manual gradient accumulation with DDP's ``no_sync``: the epoch's leftover micro-batch
is never synchronised.

The bug: with manual optimization the user accumulates gradients over ``ACCUMULATE``
micro-batches and, to save bandwidth, runs the backward of all but the last micro-batch
of a window inside ``model.no_sync()`` (DDP then skips the all-reduce and the local
gradients pile up until the next synced backward). An epoch has 5 micro-batches per
rank, so the last window is incomplete: its micro-batch runs under ``no_sync`` and the
"flush the remainder" step at the end of the epoch applies *local*, unsynchronised
gradients: every rank takes a different step and the replicas diverge.

In production: nothing fails. Losses look normal; the ranks hold different weights after
the first epoch, rank 0's checkpoint is not the model the others validated, and a
resumed run behaves differently.

The fix (``train_fixed``): the last micro-batch of the epoch is a window boundary too
(synced backward), so the flush applies averaged gradients.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]

ACCUMULATE = 2


class Regressor(pl.LightningModule):
    """A one-layer regressor with manual accumulation over ``ACCUMULATE`` micro-batches."""

    def __init__(self, sync_epoch_end: bool) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.sync_epoch_end = sync_epoch_end
        self.layer = torch.nn.Linear(4, 1)
        self.pending = False

    def training_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        opt = self.optimizers()
        loss = torch.nn.functional.mse_loss(self.layer(x), y) / ACCUMULATE
        boundary = (batch_idx + 1) % ACCUMULATE == 0
        if self.sync_epoch_end and batch_idx + 1 == self.trainer.num_training_batches:
            boundary = True  # the fix: the epoch's last micro-batch closes a window
        ddp = self.trainer.strategy.model
        skip_sync = not boundary and hasattr(ddp, "no_sync")
        with ddp.no_sync() if skip_sync else nullcontext():  # type: ignore[union-attr,operator]
            self.manual_backward(loss)
        self.pending = True
        if boundary:
            opt.step()  # type: ignore[union-attr]
            opt.zero_grad()  # type: ignore[union-attr]
            self.pending = False

    def on_train_epoch_end(self) -> None:
        if self.pending:  # flush an incomplete window (buggy twin: local gradients)
            opt = self.optimizers()
            opt.step()  # type: ignore[union-attr]
            opt.zero_grad()  # type: ignore[union-attr]
            self.pending = False

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _run(sync_epoch_end: bool) -> float:
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(40, 4, generator=generator)  # 5 micro-batches of 4 per rank
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
    model = Regressor(sync_epoch_end)
    trainer.fit(model, DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4))
    return float(model.layer.weight.sum())


def train_buggy() -> float:
    """Bug: the epoch's leftover micro-batch runs under ``no_sync``; its step is local."""
    return _run(sync_epoch_end=False)


def train_fixed() -> float:
    """Fixed: the last micro-batch of an epoch runs a synced backward."""
    return _run(sync_epoch_end=True)
