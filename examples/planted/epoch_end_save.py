"""Planted bug: an error at the end of an epoch, swallowed on one rank, desyncs the job.

At the end of every epoch rank 0 saves a side checkpoint and then every rank meets at a
barrier. The save and the barrier share one ``try``: when the save fails (a full disk:
``OSError(28)``) rank 0 logs a warning and skips the barrier, and the ranks desynchronise.
It shows only at the last step of an epoch — where ``torch.save`` runs — so a search over
the first few steps never reaches it. The minimal failing schedule is one fault:

    raise@torch.save rank=0 step=7 exception=OSError args=[28,"No space left on device"]

``train_fixed`` keeps the barrier out of the ``try``: the save may fail, the ranks stay in
step.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from _common import pl, quiet_trainer, regression_data


class Model(pl.LightningModule):
    def __init__(self, barrier_in_try: bool) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.barrier_in_try = barrier_in_try

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def on_train_epoch_end(self) -> None:
        try:
            if self.trainer.is_global_zero:
                torch.save(self.state_dict(), f"side-{self.current_epoch}.pt")
            if self.barrier_in_try:
                self.trainer.strategy.barrier()  # the bug: skipped when the save fails
        except OSError as error:
            warnings.warn(f"could not save the side checkpoint: {error}", stacklevel=1)
        if not self.barrier_in_try:
            self.trainer.strategy.barrier()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(barrier_in_try: bool) -> None:
    quiet_trainer(max_epochs=2).fit(Model(barrier_in_try), regression_data(batches=8))


def train() -> None:
    """The buggy program."""
    _fit(barrier_in_try=True)


def train_fixed() -> None:
    """The fixed twin: the barrier runs on every rank whatever the save did."""
    _fit(barrier_in_try=False)
