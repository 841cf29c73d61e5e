"""A debug checkpoint dumped on the rank whose loss went non-finite.

The bug: a callback "saves the state for post-mortem" when the training loss is NaN or
Inf, using the loss of its own rank. ``Trainer.save_checkpoint`` ends with a barrier
every rank must join; when only one rank's loss is non-finite, that rank waits in the
barrier while the others go on to the next step's gradient all-reduce. A loss goes
non-finite on one rank first when that rank's data or hardware goes wrong: a bad record,
or silent data corruption (a flipped bit in a weight on one GPU, ``flip@...``).

In production (NCCL): the job hangs at the first NaN instead of dumping its post-mortem,
until the NCCL watchdog kills it, and the dump the callback was written for never lands.

The fix (``train_fixed``): decide together (``strategy.reduce_boolean_decision``: any
rank's non-finite loss makes every rank save), so every rank joins the save.
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


class NanDump(pl.Callback):
    """Save ``nan-dump.ckpt`` once, at the first non-finite training loss."""

    def __init__(self, agreed: bool) -> None:
        self.agreed = agreed
        self.dumped = False

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, *args: Any
    ) -> None:
        bad = not bool(torch.isfinite(outputs["loss"]))
        if self.agreed:  # any rank's bad loss makes every rank save: all join the barrier
            bad = trainer.strategy.reduce_boolean_decision(bad, all=False)
        if bad and not self.dumped:  # the bug (agreed=False): this rank's loss alone
            self.dumped = True
            trainer.save_checkpoint("nan-dump.ckpt")


def _run(agreed: bool) -> float:
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=generator)
    data = TensorDataset(x, x.sum(1, keepdim=True))
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=2,
        callbacks=[NanDump(agreed)],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Regressor()
    trainer.fit(model, DataLoader(data, batch_size=4))
    return float(model.layer.weight.sum())


def train_buggy() -> float:
    """Bug: the dump (and its barrier) on the rank whose own loss went non-finite."""
    return _run(agreed=False)


def train_fixed() -> float:
    """Fixed: the ranks agree on the dump, so every rank joins it."""
    return _run(agreed=True)
