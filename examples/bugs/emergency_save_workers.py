"""An emergency checkpoint on SIGTERM that the DataLoader workers take down with them.

The bug: the program handles preemption itself, and well as far as DDP goes (the
pattern of KempnerForge#177). A callback takes SIGTERM over from Lightning (a handler
that only sets a flag); at every batch end every rank reduces the flag, and when any rank
was signalled every rank saves an emergency checkpoint at that batch, stops, and the job
exits 143 so that the scheduler requeues it. The data comes through a DataLoader with
worker processes (``num_workers=2``).

In production (SLURM signals every process of the job step; a container runtime that
sends SIGTERM to a process group does too): the SIGTERM reaches the DataLoader workers as
well as the rank. torch's workers die of it, and the rank's SIGCHLD handler raises
``DataLoader worker (pid ...) is killed by signal: Terminated`` before the batch ends:
the emergency checkpoint is never written, and the requeued job starts over (or, where
a half-written save was left, cannot resume at all). With ``num_workers=0`` the same
drill is clean, which is what hides the bug in testing.

The fix (``train_fixed``): the workers ignore SIGTERM (``worker_init_fn``), so the step
in progress finishes, the flag is reduced at the batch end and the checkpoint is saved
on the normal path; the loader still stops its workers itself when the fit ends.

    chaoslight fuzz examples/bugs/emergency_save_workers.py:train_buggy   # found
    chaoslight fuzz examples/bugs/emergency_save_workers.py:train_fixed   # clean
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

SNAPSHOT = "emergency.ckpt"
EXIT_ON_SIGTERM = 128 + 15  # what a shell reports for a process SIGTERM ended
WORKERS = 2


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


class EmergencyCheckpoint(pl.Callback):
    """On SIGTERM to any rank: every rank saves at the same batch end and stops."""

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
            trainer.save_checkpoint(SNAPSHOT)  # every rank: it ends in a barrier


def shield_from_sigterm(worker_id: int) -> None:
    """A worker ignores the scheduler's SIGTERM: its rank decides when the data stops."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _run(worker_init_fn: Any = None) -> bool:
    """Fit (resuming from the emergency checkpoint when there is one); True if preempted."""
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    x = torch.randn(32 * devices, 4, generator=generator)
    y = x.sum(1, keepdim=True) + 0.1 * torch.randn(32 * devices, 1, generator=generator)
    loader = DataLoader(
        TensorDataset(x, y),
        batch_size=4,
        num_workers=WORKERS,
        persistent_workers=True,  # started once per fit, not once per epoch
        worker_init_fn=worker_init_fn,
    )
    emergency = EmergencyCheckpoint()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=2,
        callbacks=[emergency],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    resume = SNAPSHOT if os.path.exists(SNAPSHOT) else None
    trainer.fit(Regressor(), loader, ckpt_path=resume)
    return emergency.preempted


def train_buggy() -> None:
    """Bug: the DataLoader workers die of the group's SIGTERM before the checkpoint."""
    if _run():
        sys.exit(EXIT_ON_SIGTERM)


def train_fixed() -> None:
    """Fixed: the workers ignore SIGTERM, so the emergency checkpoint is written."""
    if _run(shield_from_sigterm):
        sys.exit(EXIT_ON_SIGTERM)
