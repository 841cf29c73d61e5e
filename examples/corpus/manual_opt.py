"""Manual optimization with gradient accumulation, and a data-dependent skip.

Pattern: ``automatic_optimization = False``; each batch calls ``self.manual_backward``
(under DDP that backward runs the gradient all-reduce) and every ``ACCUMULATE`` batches
the optimizer steps. The data has a corrupt label (sample 13, ``y = 1000``) that must
not train the model.

Correct (``train``): the outlier is handled *inside the loss*: samples whose residual
exceeds ``LIMIT`` get weight 0 and every rank calls ``manual_backward`` on every batch,
whatever its data. A decision that depends on one rank's data never decides whether a
collective happens; every rank's all-reduces pair up with the same step's on the others.

Bug (``train_buggy``): "skip batches with an outlier": a rank whose batch has one
returns before ``manual_backward``. Lightning's DistributedSampler shuffles with the
seed (0): in epoch 0 sample 13 is in rank 1's third batch (step 2), so rank 1 skips one
backward that rank 0 does: from
then on rank 0's gradient all-reduce for batch k pairs with rank 1's for batch k+1,
the replicas apply different gradients, and rank 0's last all-reduce has no partner.
What a user sees: replicas out of sync, then a hang at the end of training.

Revealed with no fault (schedule: empty): the corrupt label is in the data.

Target: examples/corpus/manual_opt.py:train (correct), :train_buggy (bug)
"""

from __future__ import annotations

from typing import Any

from _corpus_common import Regressor, dataset, pl, trainer
from torch.utils.data import DataLoader

ACCUMULATE = 2  # batches per optimizer step
LIMIT = 100.0  # a residual this large means a corrupt label
CORRUPT = 13  # the index of the sample with a corrupt label


class Accumulating(Regressor):
    def __init__(self, mask_outliers: bool) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.mask_outliers = mask_outliers

    def training_step(self, batch: Any, batch_idx: int) -> None:
        optimizer = self.optimizers()
        x, y = batch
        errors = (self(x) - y).squeeze(1)
        keep = errors.detach().abs() < LIMIT
        if self.mask_outliers:
            loss = (errors.pow(2) * keep).sum() / keep.sum().clamp(min=1)
            self.manual_backward(loss / ACCUMULATE)
        elif bool(keep.all()):
            loss = errors.pow(2).mean()
            self.manual_backward(loss / ACCUMULATE)  # skipped on a rank with an outlier
        if (batch_idx + 1) % ACCUMULATE == 0:
            optimizer.step()
            optimizer.zero_grad()


def _run(mask_outliers: bool) -> None:
    pl.seed_everything(0, verbose=False)
    data = dataset(32)
    data.tensors[1][CORRUPT] = 1000.0
    trainer(max_epochs=2).fit(Accumulating(mask_outliers), DataLoader(data, batch_size=4))


def train() -> None:
    """Correct: outliers get zero weight; every rank always does its backward."""
    _run(mask_outliers=True)


def train_buggy() -> None:
    """Bug: a rank whose batch has an outlier skips its backward (and all-reduce)."""
    _run(mask_outliers=False)
