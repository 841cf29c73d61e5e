"""Metrics logged the ways Lightning's torchmetrics guide shows: ``sync_dist=True`` for
plain tensors, metric objects logged directly, and a ``MetricCollection`` computed by hand
at the epoch end.

Shape: a regressor; in training, ``self.log("train_loss", loss, on_step=True,
on_epoch=True, sync_dist=True, prog_bar=True)`` and a ``MeanAbsoluteError`` object called
on each batch and logged as an object (its step value is this rank's, its epoch value
synced); in validation, a ``MetricCollection`` of MAE, MSE and R2 (``prefix="val_"``)
updated per batch, then ``compute()`` (which syncs), ``log_dict`` and ``reset()`` in
``on_validation_epoch_end``; the program halves its own learning rate whenever the synced
``val_MeanSquaredError`` does not improve (a hand-written plateau rule), and keeps the
history of that value.

Why it is correct: every decision reads a synced value, the same on every rank, so every
rank changes its rate at the same epochs and the replicas stay equal; every rank calls
``compute()`` at the same point, so its all-gathers have all their partners.
"""

from __future__ import annotations

from typing import Any

import torch
from _upstream_common import pl, quiet_trainer
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics import MeanAbsoluteError, MeanSquaredError, MetricCollection, R2Score


def quadratic(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=generator)
    y = x[:, :1] ** 2 - x[:, 1:2] + 0.1 * torch.randn(n, 1, generator=generator)
    return TensorDataset(x, y)


class Regressor(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(3, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)
        )
        self.train_mae = MeanAbsoluteError()
        self.val_metrics = MetricCollection(
            [MeanAbsoluteError(), MeanSquaredError(), R2Score()], prefix="val_"
        )
        self.lr = 0.05
        self.history: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        predictions = self.net(x)
        loss = torch.nn.functional.mse_loss(predictions, y)
        self.log("train_loss", loss, on_step=True, on_epoch=True, sync_dist=True, prog_bar=True)
        self.train_mae(predictions, y)
        self.log("train_mae", self.train_mae, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.val_metrics.update(self.net(x), y)

    def on_validation_epoch_end(self) -> None:
        values = self.val_metrics.compute()
        self.log_dict(values)
        self.val_metrics.reset()
        mse = float(values["val_MeanSquaredError"])
        if self.history and mse >= min(self.history):
            self.lr /= 2
            for group in self.optimizers().param_groups:
                group["lr"] = self.lr
        self.history.append(mse)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.5)


def train() -> list[float]:
    """Five epochs; the synced validation MSE after each."""
    pl.seed_everything(0, verbose=False)
    model = Regressor()
    trainer = quiet_trainer(max_epochs=5, enable_checkpointing=False)
    trainer.fit(
        model,
        DataLoader(quadratic(64, 0), batch_size=8, shuffle=True),
        DataLoader(quadratic(32, 1), batch_size=8),
    )
    return model.history


if __name__ == "__main__":
    train()
