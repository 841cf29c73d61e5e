"""Planted bug: a race between two hooks, revealed only by a straggler at an epoch's end.

At the end of each epoch rank 0 writes the epoch's summary to a shared file; at the start
of the next epoch rank 1 reads it. Nothing orders the two: rank 1 first spends ~0.1 s on
its own bookkeeping, so the write usually wins — until rank 0 is a few hundred
milliseconds late at the end of epoch 0. The minimal failing schedule is one straggler:

    delay@lightning.on_train_epoch_end rank=0 step=7 seconds=0.3

(step 7: the last batch of epoch 0, 8 batches an epoch). ``train_fixed`` writes
atomically and puts a barrier between the write and the read, on every rank.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import torch
from _common import pl, quiet_trainer, regression_data

SUMMARY = "epoch-summary.json"


class Model(pl.LightningModule):
    def __init__(self, ordered: bool) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.ordered = ordered

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def on_train_epoch_end(self) -> None:
        if self.trainer.is_global_zero:
            summary = {"epoch": self.current_epoch, "weight": self.layer.weight.sum().item()}
            with open(SUMMARY + ".tmp", "w") as handle:
                json.dump(summary, handle)
            os.replace(SUMMARY + ".tmp", SUMMARY)
        if self.ordered:
            self.trainer.strategy.barrier()  # the fix: readers wait for the writer

    def on_train_epoch_start(self) -> None:
        if self.current_epoch == 0 or self.trainer.is_global_zero:
            return
        time.sleep(0.1)  # rank 1's own bookkeeping: the natural margin the race hides in
        with open(SUMMARY) as handle:
            summary = json.load(handle)
        if summary["epoch"] != self.current_epoch - 1:
            raise RuntimeError(f"read the summary of epoch {summary['epoch']}, not the last one")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(ordered: bool) -> None:
    quiet_trainer(max_epochs=2).fit(Model(ordered), regression_data(batches=8))


def train() -> None:
    """The buggy program."""
    _fit(ordered=False)


def train_fixed() -> None:
    """The fixed twin: a barrier orders the write before every read."""
    _fit(ordered=True)
