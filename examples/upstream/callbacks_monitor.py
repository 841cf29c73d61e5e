"""The callbacks users stack on a classifier, as Lightning's docs show them:
``ModelCheckpoint``, ``EarlyStopping`` and ``LearningRateMonitor``, with torchmetrics.

Shape: a 3-class MLP classifier; ``torchmetrics`` ``MulticlassAccuracy`` and
``MulticlassF1Score`` modules updated in ``validation_step`` and logged as metric objects
(``self.log("val_acc", self.val_acc)``: Lightning calls ``compute()``, which syncs them,
at the epoch end); ``self.log("val_loss", loss, sync_dist=True)``; ``ModelCheckpoint(
monitor="val_acc", mode="max", save_top_k=2, filename="{epoch}-{val_acc:.2f}")``,
``EarlyStopping(monitor="val_loss", patience=2, min_delta=0.01)`` and
``LearningRateMonitor(logging_interval="step")``, which needs the ``CSVLogger`` the
Trainer is given; ``CosineAnnealingLR`` stepped per epoch; after fit,
``load_from_checkpoint(best_model_path)``.

Why it is correct: both monitored values are synced, so every rank's callbacks see the
same numbers and take the same decisions (Lightning also reduces the stop decision and
the checkpoint decision across ranks); only rank 0 writes the checkpoint and the CSV
file, and the best path every rank reads is broadcast by Lightning.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from _upstream_common import pl, quiet_trainer
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

try:
    from lightning.pytorch.callbacks import EarlyStopping, LearningRateMonitor, ModelCheckpoint
    from lightning.pytorch.loggers import CSVLogger
except ImportError:  # the standalone package
    from pytorch_lightning.callbacks import (  # type: ignore[no-redef]
        EarlyStopping,
        LearningRateMonitor,
        ModelCheckpoint,
    )
    from pytorch_lightning.loggers import CSVLogger  # type: ignore[no-redef]

CLASSES = 3


def blobs(n: int, seed: int) -> TensorDataset:
    """Three overlapping Gaussian blobs in 4 dimensions."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, CLASSES, (n,), generator=generator)
    centres = torch.eye(CLASSES, 4) * 2.0
    return TensorDataset(centres[labels] + torch.randn(n, 4, generator=generator), labels)


class Classifier(pl.LightningModule):
    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, CLASSES)
        )
        self.val_acc = MulticlassAccuracy(num_classes=CLASSES)
        self.val_f1 = MulticlassF1Score(num_classes=CLASSES, average="macro")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), sync_dist=True)
        self.val_acc(logits, y)
        self.val_f1(logits, y)
        self.log("val_acc", self.val_acc, on_epoch=True)
        self.log("val_f1", self.val_f1, on_epoch=True)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=6)
        return [optimizer], [scheduler]


def train() -> float:
    """Fit with the three callbacks; the best validation accuracy, reloaded from its file."""
    pl.seed_everything(0, verbose=False)
    checkpoint = ModelCheckpoint(
        dirpath="checkpoints",
        monitor="val_acc",
        mode="max",
        save_top_k=2,
        filename="{epoch}-{val_acc:.2f}",
    )
    callbacks = [
        checkpoint,
        EarlyStopping(monitor="val_loss", patience=2, min_delta=0.01),
        LearningRateMonitor(logging_interval="step"),
    ]
    trainer = quiet_trainer(
        max_epochs=6, callbacks=callbacks, logger=CSVLogger(save_dir=".", name="logs")
    )
    model = Classifier()
    trainer.fit(
        model,
        DataLoader(blobs(64, 0), batch_size=8, shuffle=True),
        DataLoader(blobs(32, 1), batch_size=8),
    )
    best = Classifier.load_from_checkpoint(checkpoint.best_model_path)
    assert best.hparams.lr == model.hparams.lr
    return float(checkpoint.best_model_score)


if __name__ == "__main__":
    train()
