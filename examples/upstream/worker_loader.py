"""A map-style data set decoded in DataLoader worker processes (``num_workers=2``), as
Lightning's docs on speeding up data loading recommend.

Shape: a ``Dataset`` whose ``__getitem__`` "decodes" a record (bytes to a float tensor)
and augments it with random noise drawn from torch's generator inside the worker;
``DataLoader(num_workers=2, persistent_workers=True, shuffle=True)`` for training and
``num_workers=2`` for validation; ``seed_everything(0, workers=True)``, so Lightning's
``pl_worker_init_function`` seeds every worker from the base seed, its rank and its id;
``drop_last=True``; nothing else special: the workers keep every signal's default action,
as almost every user's do.

Why it is correct: Lightning's ``DistributedSampler`` gives each rank its own indices and
the workers only split a rank's batches between them; the augmentation is seeded per
worker and rank, so it is the same on every run; the workers are torn down by the loader
when the fit ends. (Under a scheduler's SIGTERM to the whole process group the workers
die of the signal before the rank stops: that is Lightning's known issue
``lightning-sigterm-dataloader-workers``, reported apart, not this program's bug.)
"""

from __future__ import annotations

from typing import Any

import torch
from _upstream_common import pl, quiet_trainer
from torch.utils.data import DataLoader, Dataset


class EncodedRecords(Dataset):
    """``n`` records stored as bytes, decoded on access; labels from a fixed rule."""

    def __init__(self, n: int, seed: int, augment: bool) -> None:
        generator = torch.Generator().manual_seed(seed)
        features = torch.randn(n, 5, generator=generator)
        self.records = [row.numpy().tobytes() for row in features]
        self.labels = (features[:, 0] * features[:, 1] > 0).long()
        self.augment = augment

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.frombuffer(bytearray(self.records[index]), dtype=torch.float32)
        if self.augment:
            x = x + 0.05 * torch.randn(5)
        return x, self.labels[index]


class Classifier(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(5, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)
        )

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        accuracy = (self.net(x).argmax(dim=1) == y).float().mean()
        self.log("val_acc", accuracy, sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def train() -> None:
    """Two epochs, each rank's batches loaded by two persistent worker processes."""
    pl.seed_everything(0, workers=True, verbose=False)
    train_loader = DataLoader(
        EncodedRecords(64, seed=0, augment=True),
        batch_size=8,
        shuffle=True,
        drop_last=True,
        num_workers=2,
        persistent_workers=True,
    )
    val_loader = DataLoader(EncodedRecords(32, seed=1, augment=False), batch_size=8, num_workers=2)
    trainer = quiet_trainer(max_epochs=2, enable_checkpointing=False)
    trainer.fit(Classifier(), train_loader, val_loader)


if __name__ == "__main__":
    train()
