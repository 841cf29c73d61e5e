"""A classifier with ``torchmetrics.Accuracy`` logged as a metric object.

Shape: a 3-class classifier; ``training_step`` updates a ``MulticlassAccuracy`` and logs
the metric object (Lightning calls ``compute()``, which syncs the metric's state across
ranks, at the epoch end); validation does the same with a second metric instance.

Why it is correct: every rank updates and logs the metric at every step, so every rank
joins the metric's sync at each epoch end; the logged value is the global accuracy on
every rank.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torchmetrics
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]

CLASSES = 3


def make_data(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=generator)
    labels = x[:, :CLASSES].argmax(dim=1)
    return TensorDataset(x, labels)


class Classifier(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, CLASSES)
        )
        self.train_acc = torchmetrics.Accuracy(task="multiclass", num_classes=CLASSES)
        self.val_acc = torchmetrics.Accuracy(task="multiclass", num_classes=CLASSES)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, labels = batch
        logits = self.net(x)
        self.train_acc(logits, labels)
        self.log("train_acc", self.train_acc, on_step=False, on_epoch=True)
        return torch.nn.functional.cross_entropy(logits, labels)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, labels = batch
        self.val_acc(self.net(x), labels)
        self.log("val_acc", self.val_acc)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=0.01)


def train() -> float:
    """Fit three epochs; return the final validation accuracy over all ranks."""
    pl.seed_everything(0, verbose=False)
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
    trainer.fit(
        Classifier(),
        DataLoader(make_data(48, 0), batch_size=8, shuffle=True),
        DataLoader(make_data(16, 1), batch_size=8),
    )
    return float(trainer.callback_metrics["val_acc"])


if __name__ == "__main__":
    train()
