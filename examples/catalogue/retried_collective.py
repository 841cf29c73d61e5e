"""A collective wrapped in a retry loop that falls back to the rank's own value.

Failure mode: at every step the ranks average their training loss with a direct
``dist.all_reduce``, and at each epoch's end the learning rate is annealed by the
epoch's mean. "A flaky interconnect must not kill a week-long run", so the all-reduce
sits in a retry loop (three tries, a pause between them) and, when every try fails, the
rank goes on with its own loss. A failed collective is not a transient error to retry:
when the rank's process group is aborted (NCCL's asynchronous error handling after a
link flap or a peer's failure, ``ProcessGroupNCCL.abort()``), every later call on it
fails too, and a retry on one rank pairs with nothing on the others. Here the rank gives
up after its retries, goes on with its local loss, and dies a moment later in DDP's
gradient all-reduce with a transport error that names neither the abort nor this loop.
As pytorch/pytorch#44353 puts it, a skipped or redone collective after an error "will
lead to collective communication desync"; the error that caused it is lost.

In production: the job still dies, but its log blames the network or the peer, at the
wrong call, and every restart meets the same unexplained error.

What exposes it: a ``pg_abort`` (the rank's process group aborted from under it), which
the default search draws at the reductions: ``pg_abort@dist.all_reduce rank=0 step=0``.
The verdict says rank 0 swallowed the injected abort and failed later (a transport
error), and that rank 1 raised only after it.

    chaoslight fuzz examples/catalogue/retried_collective.py:train_buggy

The fixed twin lets the collective's error raise: the rank ends with the aborted group's
own error, and the peers fail cleanly after it. A job that must survive a broken group
restarts (torchrun's ``--max-restarts``, a requeue) and builds a new one.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist
from _catalogue_common import Regressor, dataset, seeded
from torch.utils.data import DataLoader

BASE_LR = 0.1
TRIES = 3
PAUSE_SECONDS = 0.05


def distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def average_or_local(value: torch.Tensor) -> torch.Tensor:
    """The ranks' mean of ``value``, retried; this rank's own value if every try fails."""
    if not distributed():
        return value
    for _ in range(TRIES):
        total = value.clone()
        try:
            dist.all_reduce(total)
            return total / dist.get_world_size()
        except RuntimeError:  # the bug: an aborted group fails every call, on this rank only
            time.sleep(PAUSE_SECONDS)
    return value


def average(value: torch.Tensor) -> torch.Tensor:
    """The ranks' mean of ``value``; a failed collective ends the rank."""
    if not distributed():
        return value
    total = value.clone()
    dist.all_reduce(total)
    return total / dist.get_world_size()


class AnnealedRegressor(Regressor):
    """Sets the next epoch's learning rate from the epoch's loss averaged over the ranks."""

    def __init__(self, reduce: Any) -> None:
        super().__init__(lr=BASE_LR)
        self.reduce = reduce
        self.losses: list[torch.Tensor] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.losses.append(self.reduce(loss.detach()))  # the job's loss, for the schedule
        return loss

    def on_train_epoch_end(self) -> None:
        mean = float(torch.stack(self.losses).mean())
        self.losses.clear()
        for group in self.trainer.optimizers[0].param_groups:
            group["lr"] = BASE_LR * mean / (1.0 + mean)


def _run(reduce: Any) -> float:
    fit = seeded(max_epochs=3)
    model = AnnealedRegressor(reduce)
    fit.fit(model, DataLoader(dataset(32), batch_size=4))
    return float(model.layer.weight.sum())


def train_buggy() -> float:
    """Bug: the all-reduce is retried, then replaced by the rank's own value."""
    return _run(average_or_local)


def train_fixed() -> float:
    """Fixed: the all-reduce's error ends the rank."""
    return _run(average)
