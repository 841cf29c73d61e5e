"""``self.log(..., rank_zero_only=True)`` called from rank 0 alone, the documented way.

Shape: an epoch-end hook computes a rank-0-only diagnostic (the norm of the weights, which
is the same on every rank anyway) and logs it only ``if self.trainer.is_global_zero``,
with ``rank_zero_only=True``; the loss is logged by every rank with ``sync_dist=True``.

Why it is correct: Lightning documents ``rank_zero_only=True`` for exactly this: a value
logged from one process only, never reduced (no collective) and not usable as a monitor;
every collective (the gradient all-reduce, the ``sync_dist`` reduction) is made by
every rank.
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


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def on_train_epoch_end(self) -> None:
        if self.trainer.is_global_zero:
            norm = torch.linalg.vector_norm(self.layer.weight.detach())
            self.log("weight_norm", norm, rank_zero_only=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def train() -> None:
    """Fit three epochs logging a rank-0-only diagnostic."""
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=generator)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Model(), DataLoader(data, batch_size=4, shuffle=True))


if __name__ == "__main__":
    train()
