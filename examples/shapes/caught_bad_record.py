"""Records decoded inside ``training_step``; a bad one costs its rank a zero gradient.

Shape: the dataset holds JSON text records; ``training_step`` decodes them
(``json.loads``, ``record["x"]``) and runs the forward inside ``try/except
(json.JSONDecodeError, KeyError)``. A bad record makes its rank return a zero loss built
from every parameter (automatic optimization). ``validation_step`` turns a ``KeyError``
from a record into a clearer error, ``raise RuntimeError(...) from error``.

Why it is correct: the rank that met the bad record still does a backward through every
parameter, so DDP's gradient all-reduce runs on every rank as always; it contributes a
zero gradient, and every rank steps with the same averaged gradient, so the replicas stay
equal. In validation the error is not swallowed: the run fails, naming the record's
error in its chain.
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]


class Records(Dataset[tuple[str, torch.Tensor]]):
    """``count`` JSON text records with their targets, from a fixed seed."""

    def __init__(self, count: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        x = torch.randn(count, 4, generator=generator)
        self.rows = [(json.dumps({"x": row.tolist()}), row.sum().reshape(1)) for row in x]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> tuple[str, torch.Tensor]:
        return self.rows[index]


def decode(texts: list[str]) -> torch.Tensor:
    """The records' features; JSONDecodeError or KeyError when one is malformed."""
    return torch.tensor([json.loads(text)["x"] for text in texts])


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)
        )
        self.bad_batches = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        texts, y = batch
        try:
            prediction = self(decode(texts))
        except (json.JSONDecodeError, KeyError):
            self.bad_batches += 1
            # Every parameter in the graph: DDP's all-reduce still runs on this rank.
            return torch.stack([p.sum() for p in self.parameters()]).sum() * 0.0
        return torch.nn.functional.mse_loss(prediction, y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        texts, y = batch
        try:
            prediction = self(decode(texts))
        except KeyError as error:
            raise RuntimeError(f"validation batch {batch_idx} has a malformed record") from error
        self.log("val_loss", torch.nn.functional.mse_loss(prediction, y), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def train() -> int:
    """Fit two epochs over JSON records; return this rank's count of bad batches."""
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
    model = Model()
    train_loader = DataLoader(Records(32, 0), batch_size=4)
    trainer.fit(model, train_loader, DataLoader(Records(16, 1), batch_size=4))
    return model.bad_batches
