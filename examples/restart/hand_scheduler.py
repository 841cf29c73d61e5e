"""A learning-rate schedule stepped by hand, outside the checkpoint.

The model decays its learning rate with a ``StepLR`` that it builds itself at the start
of training and steps after every batch, instead of returning it from
``configure_optimizers`` (so Lightning neither steps nor saves it). The job checkpoints
at every epoch end (``last.ckpt``) and, when restarted, resumes from it.

``train_buggy`` keeps the scheduler only in memory: after a crash and a resume a fresh
scheduler counts its steps from 0 again, so the decays come at other steps than in an
uninterrupted run (the optimizer's current rate is restored, its schedule is not).
``train_fixed`` puts the scheduler's ``state_dict`` in the checkpoint
(``on_save_checkpoint`` / ``on_load_checkpoint``) and loads it into the new scheduler.

Found by the ``restart-equivalence`` check under a crash and a restart::

    restarts 1
    crash@lightning.training_step rank=0 step=6
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

EPOCHS = 3
BATCHES = 5  # per epoch and rank: the decays (every 3 steps) fall mid-epoch
DECAY_EVERY = 3


class Model(pl.LightningModule):
    """A linear regression whose learning rate halves every ``DECAY_EVERY`` steps."""

    def __init__(self, checkpointed: bool) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.checkpointed = checkpointed
        self.decay: Any = None
        self.saved_decay: dict[str, Any] | None = None

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.08, momentum=0.9)

    def on_train_start(self) -> None:
        # After a resume the optimizer (and its current rate) is already restored here.
        self.decay = torch.optim.lr_scheduler.StepLR(
            self.trainer.optimizers[0], step_size=DECAY_EVERY, gamma=0.5
        )
        if self.checkpointed and self.saved_decay is not None:
            self.decay.load_state_dict(self.saved_decay)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.decay.step()

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.checkpointed:
            checkpoint["hand_scheduler"] = self.decay.state_dict()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.saved_decay = checkpoint.get("hand_scheduler")


def _train(checkpointed: bool) -> int:
    pl.seed_everything(0, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    generator = torch.Generator().manual_seed(0)
    rows = BATCHES * 4 * devices
    data = TensorDataset(
        torch.randn(rows, 4, generator=generator), torch.randn(rows, 1, generator=generator)
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=EPOCHS,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[pl.callbacks.ModelCheckpoint(dirpath="checkpoints", save_last=True)],
    )
    last = "checkpoints/last.ckpt"
    resume = last if os.path.exists(last) else None  # a restarted job resumes
    trainer.fit(Model(checkpointed), DataLoader(data, batch_size=4), ckpt_path=resume)
    return int(trainer.global_step)


def train_buggy() -> int:
    """Bug: the hand-stepped scheduler is not in the checkpoint."""
    return _train(checkpointed=False)


def train_fixed() -> int:
    """Correct: its state is saved with the checkpoint and loaded on resume."""
    return _train(checkpointed=True)
