"""``ModelCheckpoint(monitor="val_loss")`` on a validation loss logged without ``sync_dist``.

The bug: ``validation_step`` logs ``val_loss`` with ``self.log(...)`` and no
``sync_dist=True``, so each rank's ``val_loss`` is the mean over its own half of the
validation set. ``ModelCheckpoint`` reduces its *decision* to save across ranks (Lightning
does that, so no hang), but it formats the file name from each rank's own value
(``epoch=1-val_loss=0.412.ckpt`` on rank 0, ``...0.398.ckpt`` on rank 1): only rank 0
writes, so rank 1's ``best_model_path`` names a file that does not exist. After fit,
``trainer.validate(ckpt_path="best")`` loads it on every rank: rank 1 raises
``FileNotFoundError`` and rank 0 waits for it in validation's first collective.

In production: the "evaluate the best checkpoint" stage after a long training run dies on
every non-zero rank (or, with a shared file system and a lucky rounding, loads a
different checkpoint on each rank). ``best_model_score`` also differs between ranks.

The fix (``train_fixed``): ``self.log("val_loss", loss, sync_dist=True)``: every rank
sees the same value, names the same file, and loads the same checkpoint.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]
    from pytorch_lightning.callbacks import ModelCheckpoint  # type: ignore[assignment]


class Regressor(pl.LightningModule):
    """A one-layer regressor that logs its validation loss."""

    def __init__(self, sync: bool) -> None:
        super().__init__()
        self.sync = sync
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("val_loss", loss, sync_dist=self.sync)  # buggy twin: this rank's own mean

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _data(seed: int, n: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, x.sum(1, keepdim=True) + 0.3 * torch.randn(n, 1, generator=generator))


def _run(sync: bool) -> float:
    pl.seed_everything(0, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    checkpoint = ModelCheckpoint(
        dirpath="checkpoints", filename="{epoch}-{val_loss:.3f}", monitor="val_loss", save_top_k=1
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=3,
        num_sanity_val_steps=0,
        callbacks=[checkpoint],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Regressor(sync)
    val = DataLoader(_data(1, 16), batch_size=4)
    trainer.fit(model, DataLoader(_data(0, 32), batch_size=4), val)
    (metrics,) = trainer.validate(model, val, ckpt_path="best", verbose=False)
    return float(metrics["val_loss"])


def train_buggy() -> float:
    """Bug: the monitored metric is not synced; rank 1's best path names no file."""
    return _run(sync=False)


def train_fixed() -> float:
    """Fixed: ``sync_dist=True``."""
    return _run(sync=True)
