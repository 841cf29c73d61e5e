"""``ModelCheckpoint`` keeping the two best checkpoints by a synced validation metric.

Shape: ``enable_checkpointing=True`` with ``ModelCheckpoint(dirpath="checkpoints",
monitor="val_loss", save_top_k=2, save_last=True)``: rank 0 writes (and deletes the
worse) files, every rank joins the barriers of ``save_checkpoint``. After fit, the
program reads ``best_model_path`` and loads that checkpoint on every rank.

Why it is correct: the monitored value is reduced across ranks, so every rank's callback
keeps the same top-k; the checkpoint directory is in the working directory that every
rank shares, and loading happens after fit's final barrier.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]
    from pytorch_lightning.callbacks import ModelCheckpoint  # type: ignore[assignment]


def make_data(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


class Model(pl.LightningModule):
    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams["lr"])


def train() -> str:
    """Fit four epochs keeping the top-2 checkpoints; reload the best one."""
    pl.seed_everything(0, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    checkpoint = ModelCheckpoint(
        dirpath="checkpoints", monitor="val_loss", save_top_k=2, save_last=True
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=4,
        callbacks=[checkpoint],
        logger=False,
        enable_checkpointing=True,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(
        Model(),
        DataLoader(make_data(32, 0), batch_size=4, shuffle=True),
        DataLoader(make_data(16, 1), batch_size=4),
    )
    best = Model.load_from_checkpoint(checkpoint.best_model_path)
    assert best.hparams["lr"] == 0.05
    return os.path.basename(checkpoint.best_model_path)


if __name__ == "__main__":
    train()
