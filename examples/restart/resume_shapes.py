"""Correct restartable programs of several shapes: a restart must find nothing on them.

Each function is a small 2-rank job that checkpoints and, started again in the same
directory, resumes from ``checkpoints/last.ckpt``. Each is correct; what differs is what
a correct program may legitimately do differently after a restart, which a check that
compares a restarted job with an uninterrupted one must allow:

- ``per_epoch_scheduler``: dropout (other weights after any restart: Lightning
  checkpoints no random state), Adam, a ``StepLR`` stepped per epoch, checkpoints at
  epoch ends;
- ``mid_epoch_checkpoint``: checkpoints every 3 steps, so a restart resumes mid-epoch
  with a plain ``DataLoader`` (Lightning warns it cannot resume it exactly there);
- ``accumulate_onecycle``: ``accumulate_grad_batches=2``, ``OneCycleLR`` stepped per
  optimizer step, shuffled data;
- ``plateau_early_stop``: dropout, ``ReduceLROnPlateau`` on a validation loss and
  ``EarlyStopping``: metrics differ after a restart, so the rates and the end may too;
- ``deterministic_adam``: no random draw while training (no dropout, a fixed order):
  the restarted job must end with the very same weights;
- ``iteration_based``: ``max_steps`` instead of ``max_epochs``, checkpoints at epoch
  ends. Correct, but Lightning 2.6 resumes it wrong: with ``max_steps`` set its fit
  loop does not count the checkpoint's epoch as completed (``FitLoop.on_run_start``
  skips that for iteration-based training), so the resumed fit trains one batch more
  in the old epoch (the next epoch's first batch, trained twice with a fixed order) and
  ends a batch early.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl  # type: ignore[no-redef]

LAST = "checkpoints/last.ckpt"


class Net(pl.LightningModule):
    """An MLP regressor; ``dropout`` > 0 makes every step draw random numbers."""

    def __init__(self, dropout: float = 0.0, schedule: str = "", steps: int = 0) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 16),
            torch.nn.ReLU(),
            torch.nn.Dropout(dropout),
            torch.nn.Linear(16, 1),
        )
        self.schedule = schedule
        self.steps = steps

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y), sync_dist=True)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=0.01)
        if self.schedule == "epoch":
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)]
        if self.schedule == "onecycle":
            cycle = torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.05, total_steps=self.steps)
            return {
                "optimizer": optimizer,
                "lr_scheduler": {"scheduler": cycle, "interval": "step"},
            }
        if self.schedule == "plateau":
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=0)
            return {
                "optimizer": optimizer,
                "lr_scheduler": {"scheduler": plateau, "monitor": "val_loss"},
            }
        return optimizer


def _data(batches: int, shuffle: bool = False) -> DataLoader:
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    generator = torch.Generator().manual_seed(0)
    rows = batches * 4 * devices
    x = torch.randn(rows, 4, generator=generator)
    data = TensorDataset(
        x, x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(rows, 1, generator=generator)
    )
    return DataLoader(data, batch_size=4, shuffle=shuffle)


def _fit(model: Any, loader: DataLoader, callbacks: list[Any], **options: Any) -> int:
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
        **{"max_epochs": 3, "limit_val_batches": 0, **options},
    )
    val = _data(2) if options.get("limit_val_batches") else None
    resume = LAST if os.path.exists(LAST) else None  # a restarted job resumes
    trainer.fit(model, loader, val, ckpt_path=resume)
    return int(trainer.global_step)


def _last(**options: Any) -> Any:
    return pl.callbacks.ModelCheckpoint(dirpath="checkpoints", save_last=True, **options)


def per_epoch_scheduler() -> int:
    pl.seed_everything(0, verbose=False)
    return _fit(Net(dropout=0.2, schedule="epoch"), _data(4), [_last()])


def mid_epoch_checkpoint() -> int:
    pl.seed_everything(0, verbose=False)
    return _fit(Net(), _data(4), [_last(every_n_train_steps=3)])


def accumulate_onecycle() -> int:
    pl.seed_everything(0, verbose=False)
    model = Net(dropout=0.1, schedule="onecycle", steps=9)
    return _fit(model, _data(6, shuffle=True), [_last()], accumulate_grad_batches=2)


def plateau_early_stop() -> int:
    pl.seed_everything(0, verbose=False)
    stop = pl.callbacks.EarlyStopping(monitor="val_loss", patience=1)
    model = Net(dropout=0.3, schedule="plateau")
    return _fit(model, _data(4), [_last(), stop], max_epochs=5, limit_val_batches=2)


def deterministic_adam() -> int:
    pl.seed_everything(0, verbose=False)
    return _fit(Net(), _data(4), [_last()])


def iteration_based() -> int:
    pl.seed_everything(0, verbose=False)
    return _fit(Net(), _data(4), [_last()], max_steps=10, max_epochs=-1)
