"""Resuming from a checkpoint written in ``on_train_batch_end``: a known framework issue
of Lightning up to 2.4.0 (Lightning PR #20379, fixed in 2.5.0).

Shape: ``ModelCheckpoint(every_n_train_steps=1, save_last=True)`` and a job that, when
restarted, resumes from ``last.ckpt``. The checkpoint is written inside
``on_train_batch_end``, after Lightning counted the batch processed and before it counted
it completed. On a resume, Lightning up to 2.4.0 takes the batch for unfinished and trains
it again: the resumed job takes one optimizer step more than an uninterrupted one (its
``global_step``, loop counters and learning-rate schedule end one step ahead). Nothing
fails.

``chaoslight fuzz`` finds it under a crash and a restart (``restart-equivalence``), and on
Lightning 2.0-2.4.0 reports it apart as Lightning's known issue::

    restarts 1
    crash@lightning.training_step rank=0 step=6

``train_fixed`` follows the workaround: it checkpoints at epoch ends only (Lightning's
default ``ModelCheckpoint``), which resumes the training exactly on every release. Up to
2.4.x the same pull request's other half shows there: a fit resumed from an epoch-end
checkpoint never counts that epoch completed, and ``fit_loop.epoch_progress`` ends one
epoch short (the weights and ``global_step`` are the uninterrupted run's); reported apart
as its own known issue, ``lightning-epoch-end-resume-count``.
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
    from pytorch_lightning.callbacks import ModelCheckpoint  # type: ignore[no-redef]

EPOCHS = 3
BATCHES = 4  # per epoch and rank


class Model(pl.LightningModule):
    """A linear regression with a learning rate that halves every optimizer step."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        decay = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.8)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": decay, "interval": "step"}}


def _fit(checkpoint: ModelCheckpoint) -> int:
    pl.seed_everything(0, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    generator = torch.Generator().manual_seed(0)
    rows = BATCHES * 4 * devices
    x = torch.randn(rows, 4, generator=generator)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=EPOCHS,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[checkpoint],
    )
    last = "checkpoints/last.ckpt"
    resume = last if os.path.exists(last) else None  # a restarted job resumes
    trainer.fit(Model(), DataLoader(data, batch_size=4), ckpt_path=resume)
    return int(trainer.global_step)


def train() -> int:
    """Checkpoint after every optimizer step (a resume trains one batch twice on
    Lightning up to 2.4.0: Lightning's bug)."""
    return _fit(ModelCheckpoint(dirpath="checkpoints", every_n_train_steps=1, save_last=True))


def train_fixed() -> int:
    """The workaround: checkpoint at epoch ends only."""
    return _fit(ModelCheckpoint(dirpath="checkpoints", save_last=True))


if __name__ == "__main__":
    train()
