"""OOM recovery by a coordinated skip: every rank agrees to drop the batch.

Pattern: ``training_step`` catches ``torch.OutOfMemoryError`` around the forward pass and
skips the batch (manual optimization: a skipped batch has no backward and no optimizer
step). Under DDP a skip is a collective decision: a rank that does no backward joins no
gradient all-reduce for that step. (Lightning 2.6 refuses a ``None`` from an automatic
``training_step`` under DDP outright.)

Correct (``train``): each rank puts "I ran out of memory" into a flag and the ranks
all-reduce it with MAX, an integer reduction whose result cannot depend on timing or
summation order. If any rank ran out, *every* rank skips the batch: nobody does a backward,
nobody waits in the gradient all-reduce, the weights stay equal on all ranks, and each rank
returns how many batches it skipped (the same number everywhere). The OOM is recovered
consistently, not swallowed on one rank.

Bug (``train_buggy``): the rank that ran out skips on its own. Its peers do a backward and
wait in DDP's gradient all-reduce for a rank that went on to the next batch: the ranks'
collectives pair up one step apart (replicas diverge, then the last all-reduce or a later
collective has no partner: a hang or a gloo abort on the peer).

Revealed by one OOM on one rank (no fault: both versions train normally):

    oom@lightning.forward rank=1 step=1

Target: examples/corpus/oom_skip.py:train (correct), :train_buggy (bug)
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from _corpus_common import Regressor, dataset, pl, trainer
from torch.utils.data import DataLoader


class SkipOnOOM(Regressor):
    def __init__(self, coordinated: bool) -> None:
        super().__init__()
        self.automatic_optimization = False  # a skip must also skip backward and step
        self.coordinated = coordinated
        self.skipped = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor | None:
        x, y = batch
        try:
            prediction = self(x)
        except torch.OutOfMemoryError:
            prediction = None
        skip = prediction is None
        if self.coordinated and dist.is_available() and dist.is_initialized():
            flag = torch.tensor([int(skip)], dtype=torch.int32)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # any rank out of memory: all skip
            skip = bool(flag.item())
        if skip or prediction is None:
            self.skipped += 1
            return None  # no backward, no gradient all-reduce: must hold on every rank
        optimizer = self.optimizers()
        loss = torch.nn.functional.mse_loss(prediction, y)
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()
        return loss.detach()


def _run(coordinated: bool) -> int:
    pl.seed_everything(0, verbose=False)
    model = SkipOnOOM(coordinated)
    trainer(max_steps=4).fit(model, DataLoader(dataset(64), batch_size=4))
    return model.skipped


def train() -> int:
    """Correct: the ranks agree (all-reduce MAX) before skipping a batch."""
    return _run(coordinated=True)


def train_buggy() -> int:
    """Bug: the rank that ran out of memory skips the batch alone."""
    return _run(coordinated=False)
