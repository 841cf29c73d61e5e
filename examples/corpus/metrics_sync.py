"""A torchmetrics metric synced across ranks, and a decision made from it.

Pattern: an epoch metric (``torchmetrics.MeanSquaredError``) decides something, here
whether this epoch is the best so far and so worth a ``trainer.save_checkpoint``. Under
DDP each rank holds the metric's state for its own shard; ``compute()`` gathers every
rank's state (a collective), and ``save_checkpoint`` ends in a barrier (another).

Correct (``train``): every rank calls ``compute()`` (so every rank joins the gather) and
gets the same value, computed from the same gathered states in the same order on every
rank: no timing or reduction order can make the ranks disagree. Every rank takes the
same branch and joins ``save_checkpoint``'s barrier. At the end the ranks all-gather
their per-epoch histories and the program asserts that they agree exactly.

Bug (``train_buggy``): "only rank 0 writes checkpoints, so only rank 0 needs the metric":
the compute and the decision sit under ``if trainer.is_global_zero``. Rank 0 waits in
the metric's gather (and would wait in the barrier) while rank 1 goes on to the next
epoch's collectives: a hang, or gloo aborting on mismatched sizes.

Revealed with no fault (schedule: empty): it hangs at the first epoch end.

Target: examples/corpus/metrics_sync.py:train (correct), :train_buggy (bug)
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torchmetrics
from _corpus_common import Regressor, dataset, pl, trainer
from torch.utils.data import DataLoader


class BestEpoch(Regressor):
    def __init__(self, every_rank: bool) -> None:
        super().__init__()
        self.every_rank = every_rank
        self.epoch_mse = torchmetrics.MeanSquaredError()  # syncs on compute()
        self.best = math.inf
        self.history: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        prediction = self(x)
        self.epoch_mse.update(prediction.detach(), y)
        return torch.nn.functional.mse_loss(prediction, y)

    def on_train_epoch_end(self) -> None:
        if self.every_rank or self.trainer.is_global_zero:
            value = float(self.epoch_mse.compute())  # a gather across ranks
            self.history.append(value)
            if value < self.best:
                self.best = value
                self.trainer.save_checkpoint("best.ckpt")  # rank 0 writes; all ranks wait
        self.epoch_mse.reset()

    def on_train_end(self) -> None:
        histories = self.all_gather(torch.tensor(self.history, dtype=torch.float64))
        if histories.dim() == 2 and not bool((histories == histories[0]).all()):
            raise AssertionError(f"the ranks disagree on the epoch metric: {histories.tolist()}")


def _run(every_rank: bool) -> list[float]:
    pl.seed_everything(0, verbose=False)
    model = BestEpoch(every_rank)
    trainer(max_epochs=3).fit(model, DataLoader(dataset(32), batch_size=4))
    return model.history


def train() -> list[float]:
    """Correct: every rank computes the synced metric and takes the same branch."""
    return _run(every_rank=True)


def train_buggy() -> list[float]:
    """Bug: only rank 0 computes the metric and decides; its collectives have no partner."""
    return _run(every_rank=False)
