"""A skip decision taken from a float gathered across three ranks.

Pattern: every rank measures the fraction of its batch that has labels (unlabelled
samples have a NaN target) and the job skips the step -- no backward, no optimizer step,
manual optimization -- when the mean fraction over all ranks is below ``MIN_LABELLED``.
The decision must come out the same on every rank, or some ranks join a gradient
all-reduce that others skip.

Correct (``train``): the ranks all-gather their fractions and every rank sums them in
the same order (rank 0, 1, 2): the same float32 operations on the same bits, so the
same result and the same branch everywhere, whatever the timing. (A reorderable float
all-reduce is avoided on purpose: its bits may depend on the summation order.)

Bug (``train_buggy``): each rank adds its own fraction first ("mine, then the others"),
i.e. in a rank-rotated order. Float addition is not associative: at step 1 the ranks'
fractions are 0.7, 0.8 and 0.9, whose exact mean equals the threshold 0.8, and rank 2's
rounding lands just below it while ranks 0 and 1 land on it. Rank 2 skips the step,
ranks 0 and 1 wait in the gradient all-reduce for it: a hang. With two ranks the bug
cannot show (a + b is bitwise b + a); it needs three.

Revealed with no fault at world size 3 (schedule: empty).

Target: examples/corpus/three_rank_reduce.py:train (correct), :train_buggy (bug)
"""

from __future__ import annotations

from typing import Any

import torch
from _corpus_common import Regressor, dataset, pl, rank_and_world, trainer
from torch.utils.data import DataLoader, DistributedSampler

BATCH = 10
MIN_LABELLED = 0.8
# Sharded without shuffling, rank r's step-1 batch (of 3 ranks) holds samples r + 30,
# r + 33, ..., r + 57: these leave 7, 8 and 9 of 10 labelled on ranks 0, 1 and 2.
UNLABELLED = (30, 31, 32, 33, 34, 36)


class LabelGated(Regressor):
    def __init__(self, fixed_order: bool) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.fixed_order = fixed_order
        self.skipped = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor | None:
        x, y = batch
        labelled = ~torch.isnan(y.squeeze(1))
        fractions = self.all_gather(labelled.float().mean()).reshape(-1)  # same on all ranks
        world = fractions.numel()
        start = 0 if self.fixed_order else self.global_rank % world
        total = fractions[start]
        for i in range(1, world):
            total = total + fractions[(start + i) % world]
        if total / world < MIN_LABELLED:
            self.skipped += 1
            return None  # no backward, no all-reduce: every rank must decide alike
        optimizer = self.optimizers()
        errors = torch.where(labelled, self(x).squeeze(1) - torch.nan_to_num(y.squeeze(1)), 0.0)
        loss = errors.pow(2).sum() / labelled.sum()
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()
        return loss.detach()


def _run(fixed_order: bool) -> int:
    pl.seed_everything(0, verbose=False)
    data = dataset(90)
    data.tensors[1][list(UNLABELLED)] = float("nan")
    rank, world = rank_and_world()
    shards = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=False)
    model = LabelGated(fixed_order)
    trainer(max_epochs=1).fit(model, DataLoader(data, batch_size=BATCH, sampler=shards))
    return model.skipped


def train() -> int:
    """Correct: every rank sums the gathered fractions in the same order."""
    return _run(fixed_order=True)


def train_buggy() -> int:
    """Bug: each rank sums in its own rank-rotated order and may branch differently."""
    return _run(fixed_order=False)
