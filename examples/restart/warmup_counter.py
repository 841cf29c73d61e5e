"""A learning-rate warm-up whose step counter is not in the checkpoint.

A warm-up callback raises the learning rate linearly over the first ``WARM_UP`` optimizer
steps, counting the steps itself. The job checkpoints at every epoch end (``last.ckpt``)
and, when restarted, resumes from it. The model has dropout, so after any restart the
weights differ from an uninterrupted run's even for a correct program (Lightning
checkpoints no random state): only what the random state cannot change shows the bug.

``train_buggy`` keeps its counter in a plain attribute: after a crash and a resume the
warm-up starts again from the first step, and the rest of training runs at other
learning rates. ``train_fixed`` gives the callback ``state_dict`` / ``load_state_dict``,
so Lightning saves and restores the counter with the checkpoint.

Found by the ``restart-equivalence`` check under a crash and a restart::

    restarts 1
    crash@lightning.training_step rank=0 step=6

"learning rate of group 0 at step 4: 0.0125 after the resume, 0.0625 uninterrupted".
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
BATCHES = 4  # per epoch and rank
WARM_UP = 8  # optimizer steps
PEAK_LR = 0.1


class WarmUp(pl.Callback):
    """Sets the learning rate before each step from a step counter of its own."""

    def __init__(self) -> None:
        self.steps = 0

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        scale = min(1.0, (self.steps + 1) / WARM_UP)
        for group in trainer.optimizers[0].param_groups:
            group["lr"] = PEAK_LR * scale
        self.steps += 1


class CheckpointedWarmUp(WarmUp):
    """The same, with its counter in the checkpoint."""

    def state_dict(self) -> dict[str, Any]:
        return {"steps": self.steps}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.steps = state_dict["steps"]


class Regressor(pl.LightningModule):
    """A small MLP with dropout: every step draws random numbers."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(16, 1)
        )

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=PEAK_LR)


def _train(warm_up: WarmUp) -> int:
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
        callbacks=[warm_up, pl.callbacks.ModelCheckpoint(dirpath="checkpoints", save_last=True)],
    )
    last = "checkpoints/last.ckpt"
    resume = last if os.path.exists(last) else None  # a restarted job resumes
    trainer.fit(Regressor(), DataLoader(data, batch_size=4), ckpt_path=resume)
    return int(trainer.global_step)


def train_buggy() -> int:
    """Bug: the warm-up's step counter is a plain attribute, lost on a restart."""
    return _train(WarmUp())


def train_fixed() -> int:
    """Correct: the counter is in the checkpoint (state_dict / load_state_dict)."""
    return _train(CheckpointedWarmUp())
