"""Rank-dependent numerics: each rank decides on its own value of a "global" number.

Failure mode: the learning rate is halved when the validation loss stops improving
(``ReduceLROnPlateau`` monitoring ``val_loss``). ``validation_step`` logs the loss with
``self.log("val_loss", loss)``: averaged over the epoch's batches, but, without
``sync_dist=True``, over *this rank's* batches only. Each rank's ``val_loss`` is a
different float, each rank's scheduler takes its own branch, and the ranks end up with
different learning rates. DDP averages gradients, not learning rates, so from that step
on the replicas apply different updates and drift apart. Lightning protects its own
decisions on logged metrics (``ModelCheckpoint`` and ``EarlyStopping`` reduce their
boolean decision across ranks); a learning-rate scheduler's ``step(metric)`` is not
protected.

The same shape, with the value reduced across ranks but summed in a rank-dependent
order, needs three ranks on a CPU (at two, ``a + b`` is bitwise ``b + a``):
``examples/corpus/three_rank_reduce.py``.

In production: nothing crashes; Lightning warns once about logging an epoch-level value
without ``sync_dist``. Rank 0's checkpoint is a model the other ranks did not train
with; results depend on the number of GPUs.

What exposes it: no fault. The default check ``replicas-in-sync`` names the first
optimizer step after the ranks' rates part (the fault-free baseline run fails). A fault
would only move the epoch where the ranks' decisions first differ.

    chaoslight fuzz examples/catalogue/rank_numerics.py:train_buggy

The fixed twin logs with ``sync_dist=True``: every rank gets the same mean (an
all-reduce), every scheduler takes the same branch.
"""

from __future__ import annotations

from typing import Any

import torch
from _catalogue_common import Regressor, dataset, seeded
from torch.utils.data import DataLoader


class PlateauRegressor(Regressor):
    """The corpus regressor, validated every epoch, its LR halved on a plateau."""

    def __init__(self, sync_dist: bool) -> None:
        super().__init__(lr=0.2)
        self.sync_dist = sync_dist

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self(x), y)
        self.log("val_loss", loss, sync_dist=self.sync_dist)  # bug when False: per rank

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=0)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": plateau, "monitor": "val_loss"},
        }


def _run(sync_dist: bool) -> list[float]:
    fit = seeded(max_epochs=4)  # seeds first: the model's initial weights too
    model = PlateauRegressor(sync_dist)
    train = DataLoader(dataset(32, seed=0), batch_size=4, shuffle=True)
    fit.fit(model, train, DataLoader(dataset(32, seed=1), batch_size=4))
    return [group["lr"] for group in fit.optimizers[0].param_groups]


def train_buggy() -> list[float]:
    """Bug: the plateau is decided on each rank's own validation loss."""
    return _run(sync_dist=False)


def train_fixed() -> list[float]:
    """Fixed: ``sync_dist=True``: one validation loss, the same decision on every rank."""
    return _run(sync_dist=True)
