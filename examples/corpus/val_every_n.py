"""Validation every n training steps, its loss logged with ``sync_dist=True``.

Pattern: ``val_check_interval=2``: training pauses every 2 steps for a validation run
whose ``validation_step`` logs ``val_loss`` with ``sync_dist=True``. Lightning reduces
the epoch value with an all-reduce when the validation run ends: a collective every rank
must reach, at the same point, with the same tensor shape.

Correct (``train``): every rank validates its own shard (Lightning's DistributedSampler on
the validation loader too) and logs ``val_loss`` on every rank; the all-reduce at each
validation end has all ranks. Nothing decides from the logged value (a float all-reduce's
bits may depend on summation order), so the ranks cannot part.

Bug (``train_buggy``): "rank 0 reports the metrics": the log call sits under
``if self.global_rank == 0``. Rank 0 enters the all-reduce at validation end; rank 1
has nothing to reduce and goes back to training, into the next step's collectives. What
a user sees: a hang at the first validation (or a gloo size-mismatch abort).

Revealed with no fault (schedule: empty).

Target: examples/corpus/val_every_n.py:train (correct), :train_buggy (bug)
"""

from __future__ import annotations

from typing import Any

import torch
from _corpus_common import Regressor, dataset, pl, trainer
from torch.utils.data import DataLoader


class Validated(Regressor):
    def __init__(self, every_rank: bool) -> None:
        super().__init__()
        self.every_rank = every_rank

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self(x), y)
        if self.every_rank or self.global_rank == 0:
            self.log("val_loss", loss, sync_dist=True)


def _run(every_rank: bool) -> None:
    pl.seed_everything(0, verbose=False)
    train_loader = DataLoader(dataset(64, seed=0), batch_size=4)
    val_loader = DataLoader(dataset(16, seed=1), batch_size=4)
    fit = trainer(max_steps=6, val_check_interval=2)
    fit.fit(Validated(every_rank), train_loader, val_loader)


def train() -> None:
    """Correct: every rank logs val_loss, so every rank joins its all-reduce."""
    _run(every_rank=True)


def train_buggy() -> None:
    """Bug: only rank 0 logs val_loss with sync_dist=True."""
    _run(every_rank=False)
