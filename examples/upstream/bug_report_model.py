"""Lightning's bug-report template, ``examples/pytorch/bug_report/bug_report_model.py``,
as users copy it: the ``BoringModel`` on a ``RandomDataset``.

Shape: a ``Dataset`` of ``torch.randn(length, size)`` made at construction, with **no
seed** (the template has none: each process draws from torch's default generator, whose
start state is fixed); one linear layer whose loss is the sum of its outputs;
``training_step`` returns ``{"loss": loss}``; ``train_loss``, ``valid_loss`` and
``test_loss`` logged without ``sync_dist``; the optimizer over ``self.layer.parameters()``;
``Trainer(default_root_dir=os.getcwd(), limit_train_batches=..., limit_val_batches=1,
limit_test_batches=1, num_sanity_val_steps=0)`` with Lightning's defaults otherwise (a
default ``ModelCheckpoint``, no progress bar here); ``fit`` then ``test``.

Why it is correct: DDP broadcasts rank 0's initial weights and all-reduces every gradient,
so the replicas stay equal whatever data each rank drew; every rank runs the same
number of batches (``limit_train_batches``); nothing is decided from a rank's own logged
value; the sum loss only grows more negative over these few steps, it stays finite.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from _upstream_common import devices, pl
from torch.utils.data import DataLoader, Dataset


class RandomDataset(Dataset):
    def __init__(self, size: int, length: int) -> None:
        self.len = length
        self.data = torch.randn(length, size)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.data[index]

    def __len__(self) -> int:
        return self.len


class BoringModel(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(32, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
        loss = self(batch).sum()
        self.log("train_loss", loss)
        return {"loss": loss}

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        loss = self(batch).sum()
        self.log("valid_loss", loss)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        loss = self(batch).sum()
        self.log("test_loss", loss)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.layer.parameters(), lr=0.1)


def train() -> None:
    """The template's ``run()``, on CPU and the launcher's devices."""
    train_data = DataLoader(RandomDataset(32, 64), batch_size=2)
    val_data = DataLoader(RandomDataset(32, 64), batch_size=2)
    test_data = DataLoader(RandomDataset(32, 64), batch_size=2)

    model = BoringModel()
    count = devices()
    trainer = pl.Trainer(
        default_root_dir=os.getcwd(),
        accelerator="cpu",
        devices=count,
        strategy="ddp" if count > 1 else "auto",
        limit_train_batches=4,
        limit_val_batches=1,
        limit_test_batches=1,
        num_sanity_val_steps=0,
        max_epochs=2,
        enable_model_summary=False,
        enable_progress_bar=False,
    )
    trainer.fit(model, train_dataloaders=train_data, val_dataloaders=val_data)
    trainer.test(model, dataloaders=test_data, verbose=False)


if __name__ == "__main__":
    train()
