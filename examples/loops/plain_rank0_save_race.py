"""Rank 0 writes the normalisation statistics; every rank reads them, without waiting.

The bug (``train_buggy``): before training, rank 0 computes the dataset's mean and
``torch.save``s it to ``stats.pt``; every rank then ``torch.load``s the file. Nothing
makes the readers wait for the writer: on a fast shared disk rank 0 is done first, and
the job works, until the day rank 0 is a little late (a slow disk, a busy host).

In production: ``FileNotFoundError`` (or a half-written file) on the other ranks, now
and then, at the start of the job. Revealed by ``delay@torch.save rank=0`` (a slow write:
a probe the search tries first).

The fix (``train_fixed``): a ``dist.barrier()`` between the write and the reads.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from _loop_common import dataset, model, sharded_loader
from torch.nn.parallel import DistributedDataParallel


def _train(wait: bool) -> float:
    if dist.get_rank() == 0:
        torch.save({"mean": dataset().tensors[0].mean(0)}, "stats.pt")
    if wait:
        dist.barrier()
    mean = torch.load("stats.pt")["mean"]
    net = DistributedDataParallel(model())
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    loss = torch.zeros(())
    for x, y in sharded_loader():
        loss = torch.nn.functional.mse_loss(net(x - mean), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return float(loss.detach())


def train_buggy() -> float:
    return _train(wait=False)


def train_fixed() -> float:
    return _train(wait=True)
