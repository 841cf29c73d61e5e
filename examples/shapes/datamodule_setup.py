"""A ``LightningDataModule`` whose ``setup()`` builds and splits the data.

Shape: the data lives in a datamodule; ``prepare_data`` runs on one process per node,
``setup(stage)`` on every rank and makes the same seeded train/val split everywhere.
Lightning adds a ``DistributedSampler`` to both loaders.

Why it is correct: the split comes from a fixed generator, so every rank holds the same
datasets; the samplers give each rank a disjoint, equally long shard; the model is
synchronised by DDP's gradient all-reduce, and nothing depends on the rank.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset, random_split

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]


class RegressionData(pl.LightningDataModule):
    def __init__(self, batch_size: int = 4) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.train_set: Any = None
        self.val_set: Any = None

    def prepare_data(self) -> None:
        pass  # nothing to download

    def setup(self, stage: str | None = None) -> None:
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(48, 4, generator=generator)
        y = x.sum(dim=1, keepdim=True)
        full = TensorDataset(x, y)
        split = torch.Generator().manual_seed(1)
        self.train_set, self.val_set = random_split(full, [32, 16], generator=split)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size)


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def train() -> None:
    """Fit a regressor from a datamodule for two epochs, validating each epoch."""
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
    trainer.fit(Model(), datamodule=RegressionData())


if __name__ == "__main__":
    train()
