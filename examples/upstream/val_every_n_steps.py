"""Validation every N training steps across epoch boundaries, as Lightning's docs on
``val_check_interval`` describe it ("check validation every n steps, regardless of the
epoch": an int with ``check_val_every_n_epoch=None``).

Shape: ``max_steps=15`` over 4-batch epochs, ``val_check_interval=3`` with
``check_val_every_n_epoch=None`` (validation at steps 3, 6, 9, 12, 15, in the middle of
epochs and at their ends), ``limit_val_batches=2``; the validation loss logged with
``sync_dist=True``; the model keeps the best synced validation loss it has seen and the
global step where it saw it (``on_validation_epoch_end`` reads ``callback_metrics``);
``ExponentialLR`` stepped per epoch; no checkpoint.

Why it is correct: every rank runs the same steps, so every rank validates at the same
steps and joins every ``sync_dist`` reduction; the best value is the synced one, the same
on every rank; a restarted job with no checkpoint starts over and trains the same steps.
"""

from __future__ import annotations

from typing import Any

import torch
from _upstream_common import pl, quiet_trainer
from torch.utils.data import DataLoader, TensorDataset


def waves(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 2, generator=generator) * 6 - 3
    return TensorDataset(x, torch.sin(x[:, :1]) * torch.cos(x[:, 1:]))


class WaveModel(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(2, 24), torch.nn.Tanh(), torch.nn.Linear(24, 1)
        )
        self.best = (float("inf"), -1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y), sync_dist=True)

    def on_validation_epoch_end(self) -> None:
        value = float(self.trainer.callback_metrics["val_loss"])
        if value < self.best[0]:
            self.best = (value, self.global_step)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=0.02)
        return [optimizer], [torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)]


def train() -> tuple[float, int]:
    """Train 15 steps, validating every 3; the best synced validation loss and its step."""
    pl.seed_everything(0, verbose=False)
    trainer = quiet_trainer(
        max_steps=15,
        val_check_interval=3,
        check_val_every_n_epoch=None,
        limit_val_batches=2,
        enable_checkpointing=False,
    )
    model = WaveModel()
    trainer.fit(
        model,
        DataLoader(waves(64, 0), batch_size=8, shuffle=True),
        DataLoader(waves(48, 1), batch_size=8),
    )
    return model.best


if __name__ == "__main__":
    train()
