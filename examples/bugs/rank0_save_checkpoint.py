"""``trainer.save_checkpoint`` called on rank 0 only, from a callback.

The bug: a callback snapshots the model at the end of every epoch and, "to avoid every
rank writing the same file", guards the call with ``if trainer.is_global_zero:``.
``Trainer.save_checkpoint`` already writes on rank 0 only, and it ends with
``strategy.barrier("Trainer.save_checkpoint")``, a collective every rank must join: under
the guard rank 0 waits in that barrier while rank 1 has gone on to the next epoch's
collectives.

In production (NCCL): the job hangs at the end of the first epoch, every GPU at 100 %
(busy-waiting in the collective), until the NCCL watchdog kills it after 30 minutes
("Watchdog caught collective operation timeout"). Often mistaken for a slow disk.

The fix (``train_fixed``): call ``trainer.save_checkpoint`` on every rank; Lightning
decides which rank writes.
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


class Regressor(pl.LightningModule):
    """A one-layer regressor."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class EpochSnapshot(pl.Callback):
    """Save ``snapshot-epoch{N}.ckpt`` at the end of every training epoch."""

    def __init__(self, guarded: bool) -> None:
        self.guarded = guarded

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        path = f"snapshot-epoch{trainer.current_epoch}.ckpt"
        if self.guarded:
            if trainer.is_global_zero:  # the bug: save_checkpoint's barrier on one rank only
                trainer.save_checkpoint(path)
        else:
            trainer.save_checkpoint(path)  # every rank; Lightning writes on rank 0 only


def _run(guarded: bool) -> float:
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=generator)
    data = TensorDataset(x, x.sum(1, keepdim=True))
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=3,
        callbacks=[EpochSnapshot(guarded)],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Regressor()
    trainer.fit(model, DataLoader(data, batch_size=4))
    return float(model.layer.weight.sum())


def train_buggy() -> float:
    """Bug: ``save_checkpoint`` (and its barrier) on rank 0 only."""
    return _run(guarded=True)


def train_fixed() -> float:
    """Fixed: every rank calls ``save_checkpoint``."""
    return _run(guarded=False)
