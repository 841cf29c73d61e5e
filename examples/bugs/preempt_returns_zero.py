"""A graceful stop on SIGTERM that returns normally: the preempted job exits 0.

The bug: the program handles preemption itself, and well as far as DDP goes. A callback
takes SIGTERM over from Lightning (a handler that only sets a flag), every rank reduces
the flag after each batch, and when any rank was signalled every rank sets
``trainer.should_stop``, saves a checkpoint at that batch and leaves ``fit`` at the same
step. Then ``main`` returns, and the process exits 0.

In production (SLURM, Kubernetes, any scheduler): the preempted job reports success. The
scheduler does not requeue a job that exited 0, so the run ends with the model of the
step the notice came, and nothing says training stopped at step 5 of 16; the checkpoint
saved for the restart is never resumed from.

The fix (``train_fixed``): after ``fit`` returns, exit with 143 (128 + SIGTERM) when the
fit stopped on a preemption, so the scheduler requeues the job; the requeued job resumes
from the checkpoint it saved.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]

SNAPSHOT = "preempted.ckpt"
EXIT_ON_SIGTERM = 128 + 15  # what a shell reports for a process SIGTERM ended


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


class GracefulPreemption(pl.Callback):
    """On SIGTERM to any rank: every rank stops after the same batch and saves."""

    def __init__(self) -> None:
        self.signalled = False
        self.preempted = False

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Lightning installs its own handler when fit starts; take SIGTERM over for this
        # fit (Lightning restores the previous handler when the fit ends).
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.signalled = True  # only a flag: no collective, no I/O in a signal handler

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        # Every rank joins this reduction after every batch: the decision is the same.
        if trainer.strategy.reduce_boolean_decision(self.signalled, all=False):
            self.preempted = True
            trainer.should_stop = True
            # Saved here, at the batch it stopped after: a checkpoint saved once the fit
            # has ended counts the cut-short epoch as finished, and the requeued job would
            # skip the rest of it (restart-equivalence finds that).
            trainer.save_checkpoint(SNAPSHOT)  # every rank: it ends in a barrier


def _run() -> bool:
    """Fit (resuming from the preemption snapshot when there is one); True if preempted."""
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    x = torch.randn(32 * devices, 4, generator=generator)
    y = x.sum(1, keepdim=True) + 0.1 * torch.randn(32 * devices, 1, generator=generator)
    preemption = GracefulPreemption()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=2,
        callbacks=[preemption],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    resume = SNAPSHOT if os.path.exists(SNAPSHOT) else None
    trainer.fit(Regressor(), DataLoader(TensorDataset(x, y), batch_size=4), ckpt_path=resume)
    return preemption.preempted


def train_buggy() -> None:
    """Bug: a fit stopped by the preemption returns, and the job exits 0."""
    _run()


def train_fixed() -> None:
    """Fixed: a fit stopped by the preemption exits 143, so the job is requeued."""
    if _run():
        sys.exit(EXIT_ON_SIGTERM)
