"""Correct: a plain DDP loop over an iterable dataset, validated every three steps.

Each rank streams its own equal share of the data (an ``IterableDataset`` sharded by
rank, ``num_workers=0``). Every third step every rank evaluates its half of a held-out
set and all-reduces ``[sum of losses, count]`` (SUM): the job-wide validation loss is
the same on every rank, so the early stop it decides is taken by all ranks together.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.distributed as dist
from _loop_common import BATCH, dataset, model
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, IterableDataset

EVERY = 3
TARGET = 0.5  # stop once the validation loss is below this


class Shard(IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    """Every ``world``-th sample of ``samples`` (a range of the data) from ``rank``."""

    def __init__(self, samples: range, rank: int, world: int) -> None:
        self.samples, self.rank, self.world = samples, rank, world

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        x, y = dataset(80).tensors
        for index in self.samples[self.rank :: self.world]:
            yield x[index], y[index]


def _validate(net: DistributedDataParallel, loader: DataLoader) -> float:
    totals = torch.zeros(2)
    with torch.no_grad():
        for x, y in loader:
            totals[0] += torch.nn.functional.mse_loss(net.module(x), y, reduction="sum")
            totals[1] += len(y)
    dist.all_reduce(totals)  # every rank, every validation
    return float(totals[0] / totals[1])


def train() -> float:
    rank, world = dist.get_rank(), dist.get_world_size()
    net = DistributedDataParallel(model())
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    train_loader = DataLoader(Shard(range(64), rank, world), batch_size=BATCH, num_workers=0)
    val_loader = DataLoader(Shard(range(64, 80), rank, world), batch_size=BATCH, num_workers=0)
    val_loss = float("inf")
    for step, (x, y) in enumerate(train_loader):
        torch.nn.functional.mse_loss(net(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % EVERY == EVERY - 1:
            val_loss = _validate(net, val_loader)
            if val_loss < TARGET:
                break  # the same decision on every rank: the loss is the job's
    return val_loss
