"""Lightning's ``OnExceptionCheckpoint`` under DDP: a known framework issue (Lightning#20187).

Shape: ``callbacks=[OnExceptionCheckpoint(dirpath=".")]``, as Lightning's docs show. With no
error the callback does nothing. When one rank raises, Lightning calls the callback's
``on_exception`` on that rank only, and it calls ``trainer.save_checkpoint``, which ends in a
barrier: the failing rank waits there while its peers wait in the next gradient all-reduce.
Nothing releases either (on NCCL: a timeout after 30 minutes).

``chaoslight fuzz`` finds the hang with any error on one rank, matches it to Lightning's
known issue, prints it once under "known issue in lightning X.Y.Z" with the workaround, and
goes on searching this program for its own bugs (``--strict`` makes it a failure)::

    chaoslight fuzz examples/known_issues/on_exception_checkpoint.py:train
    chaoslight fuzz examples/known_issues/on_exception_checkpoint.py:train_fixed --strict

``train_fixed`` follows the workaround: its own ``on_exception`` writes this rank's own file
with ``torch.save`` (no collective) and lets the exception go on, so every rank ends.

CPU vs GPU: the same hang on NCCL ends, if at all, by NCCL's watchdog timeout.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import OnExceptionCheckpoint
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]
    from pytorch_lightning.callbacks import OnExceptionCheckpoint  # type: ignore[no-redef]


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


class SaveThisRank(pl.Callback):
    """The workaround: on an error, this rank saves its own weights, with no collective."""

    def on_exception(self, trainer: Any, module: Any, exception: BaseException) -> None:
        torch.save(module.state_dict(), f"on-exception-rank{trainer.global_rank}.pt")


def _fit(callback: pl.Callback) -> None:
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=generator)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=2,
        callbacks=[callback],
        logger=False,
        enable_checkpointing=True,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Model(), DataLoader(data, batch_size=4, shuffle=True))


def train() -> None:
    """Fit two epochs with Lightning's checkpoint-on-exception callback (hangs under DDP
    when one rank raises: Lightning's bug)."""
    _fit(OnExceptionCheckpoint(dirpath="."))


def train_fixed() -> None:
    """The same fit with the workaround: each rank saves its own file on an error."""
    _fit(SaveThisRank())


if __name__ == "__main__":
    train()
