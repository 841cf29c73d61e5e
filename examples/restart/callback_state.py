"""A callback whose state is not in the checkpoint: the restarted job trains differently.

A warm-up callback raises the learning rate over the first epochs from a counter it
keeps itself. The job checkpoints at every epoch end (Lightning's default
``ModelCheckpoint``) and, when restarted, resumes from ``last.ckpt``. ``train_buggy``'s
counter is not in the checkpoint: after a crash and a restart it starts again at 0, the
rest of training runs at the wrong learning rate, and the job ends with other weights
than an uninterrupted one. ``train_fixed`` gives the callback ``state_dict`` /
``load_state_dict``, so Lightning saves and restores the counter.

Nothing fails by itself: only comparing the restarted job's final weights with an
uninterrupted run's shows it, which is what the ``resume-equivalence`` check does::

    chaoslight fuzz examples/restart/callback_state.py:train_buggy --check resume-equivalence

(The default checks do not compare final weights after a restart: Lightning checkpoints
carry no random-number state, so a correct program with dropout ends elsewhere too.)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "planted"))
from _common import LinearRegression, quiet_trainer, regression_data

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl  # type: ignore[no-redef]

EPOCHS = 3
BATCHES = 4  # per epoch and rank


class WarmUp(pl.Callback):
    """Raises the learning rate epoch by epoch, from a counter of its own."""

    def __init__(self) -> None:
        self.epochs_seen = 0

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        self.epochs_seen += 1
        for group in trainer.optimizers[0].param_groups:
            group["lr"] = 0.01 * self.epochs_seen


class CheckpointedWarmUp(WarmUp):
    """The same, with its counter in the checkpoint."""

    def state_dict(self) -> dict[str, Any]:
        return {"epochs_seen": self.epochs_seen}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.epochs_seen = state_dict["epochs_seen"]


def _train(warm_up: WarmUp) -> None:
    checkpoints = pl.callbacks.ModelCheckpoint(dirpath="checkpoints", save_last=True)
    trainer = quiet_trainer(
        max_epochs=EPOCHS, enable_checkpointing=True, callbacks=[warm_up, checkpoints]
    )
    last = "checkpoints/last.ckpt"
    resume = last if os.path.exists(last) else None  # a restarted job resumes
    trainer.fit(LinearRegression(lr=0.01), regression_data(batches=BATCHES), ckpt_path=resume)


def train_buggy() -> None:
    _train(WarmUp())


def train_fixed() -> None:
    _train(CheckpointedWarmUp())
