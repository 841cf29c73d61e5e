"""A step skipped on the rank whose loss is not finite: a flipped bit hangs the job.

Failure mode: a model trained with manual optimization guards its step: when the loss is
NaN or Inf it logs a warning and skips the batch (no backward, no optimizer step), "so
one bad batch cannot poison the weights". The loss is the rank's own. A loss goes
non-finite on one rank first when something goes wrong on that rank alone: a bad record,
or silent data corruption, a bit flipped in a weight or a gradient by a flaky GPU (the
exponent's high bit turns 0.004 into about 1e36). That rank skips its backward, and so
its share of DDP's gradient all-reduce, while the others wait in theirs: the ranks'
collectives no longer pair up, and the job hangs (on NCCL, until the watchdog ends it).
Skipping per rank is the documented trap: Lightning refuses a ``None`` from
``training_step`` under DDP for exactly this reason (Lightning-AI/pytorch-lightning#19918),
and NVIDIA-NeMo/Automodel#2468 fixed a per-rank ``continue`` on a data-dependent error
that hung DDP the same way.

What exposes it: ``flip`` (one bit of one element of a parameter, gradient or optimizer
state, on one rank, at one step), which the default search draws: it is what a GPU with
silent data corruption does. Under ``flip@lightning.training_step rank=0 step=0`` the
verdict is a hang: it names the flip that fired on rank 0, rank 0 waiting in the next
batch's broadcast and rank 1 still in its backward (DDP's gradient all-reduce).

    chaoslight fuzz examples/catalogue/nonfinite_skip.py:train_buggy

The fixed twin decides together: ``strategy.reduce_boolean_decision`` over the ranks'
"is my loss finite" (any rank's bad loss makes every rank skip), so every rank skips the
same batches. A flip that leaves the losses finite goes on silently in both twins (a flip
is a fault no program is expected to survive unharmed; chaoslight reports, as a note,
whether any check saw it).
"""

from __future__ import annotations

from typing import Any

import torch
from _catalogue_common import Regressor, dataset, seeded
from torch.utils.data import DataLoader


class GuardedRegressor(Regressor):
    """Manual optimization that skips the batch whose loss is not finite."""

    def __init__(self, agreed: bool) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.agreed = agreed
        self.skipped = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self(x), y)
        finite = bool(torch.isfinite(loss))
        if self.agreed:  # every rank skips when any rank's loss is bad
            finite = self.trainer.strategy.reduce_boolean_decision(finite, all=True)
        if not finite:  # the bug (agreed=False): this rank's loss alone decides
            self.skipped += 1
            return loss.detach()
        optimizer = self.optimizers()
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()
        return loss.detach()


def _run(agreed: bool) -> float:
    fit = seeded(max_epochs=2)
    model = GuardedRegressor(agreed)
    fit.fit(model, DataLoader(dataset(32), batch_size=4))
    return float(model.layer.weight.sum())


def train_buggy() -> float:
    """Bug: the rank whose loss is not finite skips its backward alone."""
    return _run(agreed=False)


def train_fixed() -> float:
    """Fixed: the ranks agree on the skip."""
    return _run(agreed=True)
