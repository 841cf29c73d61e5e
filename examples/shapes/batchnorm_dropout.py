"""Dropout and (per-rank) BatchNorm under DDP, as most CPU users must write it.

Shape: an MLP with ``BatchNorm1d`` and ``Dropout``. ``sync_batchnorm=True`` would convert
the batch norm to ``SyncBatchNorm``, but torch's ``SyncBatchNorm`` refuses CPU tensors
("SyncBatchNorm layers only work with GPU modules"), so on CPU every rank normalises with
its own batch statistics. The running statistics are buffers; DDP broadcasts rank 0's
to every rank at the start of each forward (``broadcast_buffers=True``, the default).

Why it is correct: this is standard DDP: the parameters stay identical (gradients are
all-reduced); a rank's running statistics may differ from rank 0's between its last
training forward and the next forward, which overwrites them with rank 0's; validation
runs in eval mode after that broadcast. Dropout masks differ per rank, which only
changes each rank's local gradient, which DDP averages.
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


def make_data(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = 3 * torch.randn(n, 4, generator=generator) + 1
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 16),
            torch.nn.BatchNorm1d(16),
            torch.nn.ReLU(),
            torch.nn.Dropout(0.2),
            torch.nn.Linear(16, 1),
        )

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def train() -> None:
    """Fit two epochs with batch norm and dropout."""
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
    trainer.fit(
        Model(),
        DataLoader(make_data(32, 0), batch_size=4, shuffle=True),
        DataLoader(make_data(16, 1), batch_size=4),
    )


if __name__ == "__main__":
    train()
