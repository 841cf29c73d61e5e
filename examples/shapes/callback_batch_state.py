"""A custom ``Callback`` that keeps state across batches in ``on_train_batch_end``.

Shape: a callback counts the batches and sums the (local, detached) losses it sees in
``on_train_batch_end``; every ``EVERY`` steps it logs its running mean, reduced across
ranks with ``pl_module.log(..., sync_dist=True)``; at ``on_train_end`` it all-reduces its
count with ``trainer.strategy.reduce`` and checks it.

Why it is correct: the callback's collectives depend only on the batch index, which every
rank shares; every rank runs the same number of batches.
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

EVERY = 3


class LossTracker(pl.Callback):
    def __init__(self) -> None:
        self.batches = 0
        self.total = 0.0
        self.global_batches = 0

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        self.batches += 1
        self.total += float(outputs["loss"].detach())
        if self.batches % EVERY == 0:
            pl_module.log("running_loss", self.total / self.batches, sync_dist=True)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        count = trainer.strategy.reduce(torch.tensor(float(self.batches)), reduce_op="sum")
        self.global_batches = int(count)
        assert self.global_batches == self.batches * trainer.world_size


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def train() -> int:
    """Fit two epochs with the tracker; return the batches run over all ranks."""
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(40, 4, generator=generator)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    tracker = LossTracker()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=2,
        callbacks=[tracker],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Model(), DataLoader(data, batch_size=4, shuffle=True))
    return tracker.global_batches


if __name__ == "__main__":
    train()
