"""``trainer.should_stop = True`` decided on one rank from a rank-local loss.

The bug: a "stop when good enough" callback reads the step's loss in
``on_train_batch_end`` and sets ``trainer.should_stop = True`` once it falls below a
target. The loss is each rank's own (its own batch), and Lightning does not reduce a raw
``should_stop`` across ranks (only ``EarlyStopping`` does, through
``strategy.reduce_boolean_decision``): the rank whose batch first crosses the target
leaves the epoch loop, and the other rank waits in the next step's gradient all-reduce.

In production (NCCL): training "freezes" near the end, at a step that depends on the
data order; one rank's process has left ``fit`` and is waiting at the end-of-fit barrier,
the others spin in an all-reduce until the 30-minute watchdog timeout.

The fix (``train_fixed``): decide on the loss averaged across ranks
(``trainer.strategy.reduce``), so every rank takes the same decision at the same step.
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

TARGET = 0.6


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


class StopAtTarget(pl.Callback):
    """Stop fit once the training loss falls below ``TARGET``."""

    def __init__(self, synced: bool) -> None:
        self.synced = synced

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        loss = outputs["loss"].detach()
        if self.synced:
            loss = trainer.strategy.reduce(loss, reduce_op="mean")  # the same on every rank
        if float(loss) < TARGET:
            trainer.should_stop = True  # buggy twin: this rank's own loss decides alone


def _run(synced: bool) -> int:
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=generator)
    y = x.sum(1, keepdim=True) + 0.5 * torch.randn(64, 1, generator=generator)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=3,
        callbacks=[StopAtTarget(synced)],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Regressor(), DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True))
    return trainer.global_step


def train_buggy() -> int:
    """Bug: a rank-local loss sets ``trainer.should_stop`` on that rank alone."""
    return _run(synced=False)


def train_fixed() -> int:
    """Fixed: the loss is averaged across ranks before the decision."""
    return _run(synced=True)
