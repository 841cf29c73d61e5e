"""A resume that catches the checkpoint's load error and starts over, on one rank.

The bug: a job trains, checkpoints, and resumes from its checkpoint (here in one script:
a first ``fit`` saves ``stage1.ckpt``, a second resumes from it). "A corrupted
checkpoint must not kill a week-long job", so the resume catches the load's error and
starts the fit over from scratch. The error is caught on the rank whose read failed (a
truncated file, ``bad_checkpoint@lightning.load_checkpoint``, or any error of the load):
that rank builds a new Trainer and model and trains from epoch 0 while its peers resumed
at epoch 2, so the ranks run different numbers of steps in collectives that must pair up.

In production (NCCL): the job hangs at the end of the resumed ranks' training (or runs
on with replicas from different epochs), and the log shows a resume that worked.

The fix (``train_fixed``): let the load's error end the job (every rank fails cleanly,
the scheduler or a human decides), or fall back on every rank together.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]


class Regressor(pl.LightningModule):
    """A one-layer regressor."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def make_trainer(max_epochs: int) -> pl.Trainer:
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    return pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=max_epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )


def _run(start_over: bool) -> float:
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=generator)
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4)
    first = make_trainer(max_epochs=2)
    first.fit(Regressor(), loader)
    first.save_checkpoint("stage1.ckpt")

    model = Regressor()
    try:
        make_trainer(max_epochs=4).fit(model, loader, ckpt_path="stage1.ckpt")
    except (RuntimeError, EOFError, OSError):
        if not start_over:
            raise  # the fix: a checkpoint that cannot be read ends the job
        model = Regressor()  # the bug: this rank alone starts over, from epoch 0
        make_trainer(max_epochs=4).fit(model, loader)
    return float(model.layer.weight.sum())


def train_buggy() -> float:
    """Bug: a rank whose checkpoint read fails trains from scratch, alone."""
    return _run(start_over=True)


def train_fixed() -> float:
    """Fixed: the load's error ends the rank; its peers are released."""
    return _run(start_over=False)
