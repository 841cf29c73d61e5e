"""What the planted examples share: the data and the quiet CPU DDP trainer around a model."""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl  # type: ignore[no-redef]

MAX_STEPS = 4


def fit(model: Any) -> None:
    """Fit ``model`` for a few steps on every rank of the job (``WORLD_SIZE``, else one)."""
    pl.seed_everything(0, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(
        torch.randn(64, 4, generator=generator), torch.randn(64, 1, generator=generator)
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_steps=MAX_STEPS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, DataLoader(data, batch_size=4))


def regression_data(batches: int = 8, batch_size: int = 4) -> DataLoader:
    """Seeded (x, y) regression batches: x float (batch_size, 4), y float (batch_size, 1)."""
    generator = torch.Generator().manual_seed(0)
    rows = batches * batch_size * int(os.environ.get("WORLD_SIZE", "1"))
    data = TensorDataset(
        torch.randn(rows, 4, generator=generator), torch.randn(rows, 1, generator=generator)
    )
    return DataLoader(data, batch_size=batch_size)


def quiet_trainer(**options: Any) -> Any:
    """A quiet CPU Trainer on every rank of the job (``WORLD_SIZE``, else one), seeded."""
    pl.seed_everything(0, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    settings: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": devices,
        "strategy": "ddp" if devices > 1 else "auto",
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
    }
    return pl.Trainer(**{**settings, **options})


class LinearRegression(pl.LightningModule):
    """A one-layer regression model with plain SGD: the smallest thing DDP can train."""

    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.lr = lr

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)
