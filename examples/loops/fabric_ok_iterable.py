"""Correct: a Fabric loop over an iterable dataset, with a run name rank 0 picks.

The stream is an ``IterableDataset`` that shards itself by rank (every rank gets the
same number of samples: a rank that ran out first would leave its peers waiting in the
gradient all-reduce), read with ``num_workers=0``. Rank 0 picks the run's name from
its clock and ``fabric.broadcast``s it, so every rank saves under the same path; the
final ``fabric.save`` is called by every rank.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import torch
from _loop_common import BATCH, dataset, fabric, model
from torch.utils.data import DataLoader, IterableDataset


class Stream(IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    """The regression set as a stream, every ``world``-th sample from ``rank``."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world = rank, world

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        x, y = dataset().tensors
        for index in range(self.rank, len(x), self.world):
            yield x[index], y[index]


def train() -> float:
    runner = fabric()
    name = runner.broadcast(f"run-{time.time_ns()}" if runner.global_rank == 0 else None)
    module = model()
    net, optimizer = runner.setup(module, torch.optim.SGD(module.parameters(), lr=0.05))
    stream = Stream(runner.global_rank, runner.world_size)
    loader = runner.setup_dataloaders(DataLoader(stream, batch_size=BATCH, num_workers=0))
    loss = torch.zeros(())
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(net(x), y)
        runner.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    runner.save(f"{name}.ckpt", {"model": net, "optimizer": optimizer})
    return float(runner.all_reduce(loss.detach(), reduce_op="mean"))
