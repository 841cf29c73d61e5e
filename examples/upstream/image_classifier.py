"""Image classification with a ``LightningDataModule``, adapted from Lightning's
``examples/pytorch/basics/backbone_image_classifier.py`` and the DataModule guide.

Shape: a ``Backbone`` (a small conv net here, an MLP upstream) passed into
``LitClassifier``, which calls ``save_hyperparameters(ignore=["backbone"])``; logs
``train_loss`` with ``on_epoch=True``, ``valid_loss`` with ``on_step=True``; a DataModule
whose ``prepare_data`` "downloads" the data set (writes it once, on local rank 0, as the
guide says, atomically) and whose ``setup(stage)`` loads it on every rank and splits it
with a seeded ``random_split``; fit with ``check_val_every_n_epoch=1``, then
``validate`` and ``test`` from the best checkpoint, as upstream's ``cli_main`` does.

Why it is correct: Lightning runs ``prepare_data`` on one process per node and a barrier
after it, so every rank's ``setup`` finds the whole file (written to a temporary name and
renamed, so a crash mid-write leaves no half file for a restarted job to trust); every
rank splits alike; metrics logged without ``sync_dist`` are only reported, nothing
decides on them.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from _upstream_common import CLASSES, pl, quiet_trainer, save_atomically, synthetic_digits
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

DATA_FILE = os.path.join("datasets", "digits.pt")


class Backbone(torch.nn.Module):
    def __init__(self, hidden_dim: int = 16) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, kernel_size=3, padding=1)
        self.l1 = torch.nn.Linear(4 * 4 * 4, hidden_dim)
        self.l2 = torch.nn.Linear(hidden_dim, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(torch.relu(self.conv(x)), 2)
        x = torch.relu(self.l1(x.view(x.size(0), -1)))
        return self.l2(x)


class LitClassifier(pl.LightningModule):
    def __init__(self, backbone: Backbone | None = None, learning_rate: float = 0.01) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["backbone"])
        self.backbone = backbone if backbone is not None else Backbone()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.backbone(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("valid_loss", F.cross_entropy(self(x), y), on_step=True)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test_loss", F.cross_entropy(self(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)


class DigitsDataModule(pl.LightningDataModule):
    def __init__(self, batch_size: int = 8) -> None:
        super().__init__()
        self.batch_size = batch_size

    def prepare_data(self) -> None:
        if not os.path.exists(DATA_FILE):  # the "download", once per node
            train, test = synthetic_digits(96, seed=10), synthetic_digits(16, seed=11)
            save_atomically({"train": train.tensors, "test": test.tensors}, DATA_FILE)

    def setup(self, stage: str) -> None:
        tensors = torch.load(DATA_FILE)
        if stage in ("fit", "validate"):
            full = TensorDataset(*tensors["train"])
            self.train_set, self.val_set = random_split(
                full, [80, 16], generator=torch.Generator().manual_seed(42)
            )
        if stage == "test":
            self.test_set = TensorDataset(*tensors["test"])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, batch_size=self.batch_size)


def train() -> float:
    """Fit, validate and test the best checkpoint; the test loss."""
    pl.seed_everything(1234, verbose=False)
    model, datamodule = LitClassifier(Backbone()), DigitsDataModule()
    trainer = quiet_trainer(max_epochs=2)
    trainer.fit(model, datamodule=datamodule)
    trainer.validate(model, datamodule=datamodule, verbose=False)
    results = trainer.test(ckpt_path="best", datamodule=datamodule, verbose=False)
    return float(results[0]["test_loss"])


if __name__ == "__main__":
    train()
