"""A parameter edited on one rank only: the replicas drift apart, silently.

Failure mode: a max-norm constraint (rescale the weight when its norm passes a bound,
as in the classic dropout paper) lives in the callback that also logs the weight norm,
and the author put both under ``if trainer.is_global_zero:`` to log from one rank. The
rescale then runs on rank 0 alone. DDP keeps replicas equal only by averaging
*gradients*; it broadcasts the weights once, when it wraps the model. From the first step
where the constraint bites, rank 0's weights differ from rank 1's and never meet again.
The same happens with ``@rank_zero_only`` on a hook that edits the model, or with any
in-place edit of a parameter outside the optimizer step that depends on the rank.

In production: nothing crashes. The loss curve (logged from rank 0) looks fine; the
checkpoint (saved from rank 0) is rank 0's model, which is not the model the other ranks
trained with; evaluation on another rank disagrees with rank 0's; "multi-GPU accuracy is
worse than single-GPU" is the usual ticket.

What exposes it: no fault. The default check ``replicas-in-sync`` compares the ranks'
parameter checksums after every optimizer step and names the first step and parameter
that differ, in the fault-free baseline run (it fails as "fails with no fault injected").

    chaoslight fuzz examples/catalogue/one_rank_edit.py:train_buggy

The fixed twin (``train_fixed``) applies the constraint on every rank (only the logging
stays on rank 0). See also ``examples/corpus/two_fits.py`` (the learning rate set in an
``@rank_zero_only`` hook between two fits).
"""

from __future__ import annotations

from typing import Any

import torch
from _catalogue_common import Regressor, dataset, pl, seeded
from torch.utils.data import DataLoader

MAX_NORM = 1.5  # the target weights have norm 2: the constraint bites after a few steps


class MaxNormMonitor(pl.Callback):
    """Logs the weight norm from rank 0 and keeps it at most ``MAX_NORM``."""

    def __init__(self, every_rank: bool) -> None:
        self.every_rank = every_rank
        self.norms: list[float] = []

    def on_train_batch_end(self, trainer: Any, module: Any, *args: Any) -> None:
        weight = module.layer.weight
        if self.every_rank:
            _constrain(weight)
        if trainer.is_global_zero:
            self.norms.append(float(weight.norm()))
            if not self.every_rank:
                _constrain(weight)  # the bug: the edit sits in the rank-0 logging block


def _constrain(weight: torch.Tensor) -> None:
    with torch.no_grad():
        norm = float(weight.norm())
        if norm > MAX_NORM:
            weight.mul_(MAX_NORM / norm)


def _run(every_rank: bool) -> list[float]:
    monitor = MaxNormMonitor(every_rank)
    fit = seeded(max_steps=8, callbacks=[monitor])
    fit.fit(Regressor(lr=0.2), DataLoader(dataset(64), batch_size=4))
    return monitor.norms


def train_buggy() -> list[float]:
    """Bug: the max-norm rescale runs on rank 0 only."""
    return _run(every_rank=False)


def train_fixed() -> list[float]:
    """Fixed: the rescale runs on every rank; only the log line is rank 0's."""
    return _run(every_rank=True)
