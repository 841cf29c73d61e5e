"""``self.log_dict`` of several metrics, per step and per epoch, synced across ranks.

Shape: training and validation both log a dict of metrics with ``sync_dist=True``; the
training metrics are logged ``on_step`` and ``on_epoch``, so Lightning reduces them at
every step and again at the epoch end; the program reads ``trainer.callback_metrics``
after fit.

Why it is correct: every rank logs the same keys at the same steps, so every rank joins
each ``sync_dist`` all-reduce; nothing branches on the rank or on a reduced value.
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
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def _metrics(self, batch: Any) -> dict[str, torch.Tensor]:
        x, y = batch
        prediction = self.layer(x)
        return {
            "mse": torch.nn.functional.mse_loss(prediction, y),
            "mae": torch.nn.functional.l1_loss(prediction, y),
        }

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        metrics = self._metrics(batch)
        self.log_dict(
            {f"train_{k}": v for k, v in metrics.items()},
            on_step=True,
            on_epoch=True,
            sync_dist=True,
        )
        return metrics["mse"]

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        metrics = self._metrics(batch)
        self.log_dict({f"val_{k}": v for k, v in metrics.items()}, sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def train() -> dict[str, float]:
    """Fit two epochs logging metric dicts; return the final callback metrics."""
    pl.seed_everything(0, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=2,
        log_every_n_steps=1,
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
    return {k: float(v) for k, v in trainer.callback_metrics.items()}


if __name__ == "__main__":
    train()
