"""A plain DDP loop whose error handler flushes the pending metrics on rank 0 alone.

The bug (``train_buggy``): the loop sums its loss locally and every four steps every
rank reduces its sums onto rank 0 (``dist.reduce(pending, dst=0)``), which logs them.
``except RuntimeError:`` around the forward and backward flushes what is pending before
the error ends the job, and the flush, like every log line, is rank 0's:
``if rank == 0: dist.reduce(pending, dst=0)``. When the error strikes rank 0 alone (an
OOM in its backward), that reduce meets no partner: the peers are in the step's gradient
all-reduce. The job hangs in its error path and the error is never raised.

In production (NCCL): an OOM that should end the job with a clear message hangs it
until the NCCL timeout instead. Revealed by ``oom@torch.backward rank=0 step=2``.

The fix (``train_fixed``): no collective in an error path: each rank logs its own
pending sums (``metrics-rank<N>.txt``) and re-raises.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from _loop_common import model, sharded_loader
from torch.nn.parallel import DistributedDataParallel

EVERY = 4


def _log(pending: torch.Tensor, name: str) -> None:
    with open(name, "a") as out:
        out.write(f"mean_loss={pending[0].item() / max(pending[1].item(), 1.0):.4f}\n")


def _train(local_flush: bool) -> float:
    rank = dist.get_rank()
    net = DistributedDataParallel(model())
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    pending = torch.zeros(2)  # the sum of the losses, their count
    loss = torch.zeros(())
    for step, (x, y) in enumerate(sharded_loader()):
        try:
            loss = torch.nn.functional.mse_loss(net(x), y)
            loss.backward()
        except RuntimeError:
            if local_flush:
                _log(pending, f"metrics-rank{rank}.txt")
            elif rank == 0:  # the bug: a collective on one rank, in an error path
                dist.reduce(pending, dst=0)
                _log(pending, "metrics.txt")
            raise
        optimizer.step()
        optimizer.zero_grad()
        pending += torch.stack([loss.detach(), torch.ones(())])
        if step % EVERY == EVERY - 1:
            dist.reduce(pending, dst=0)  # every rank, every fourth step
            if rank == 0:
                _log(pending, "metrics.txt")
            pending.zero_()
    return float(loss.detach())


def train_buggy() -> float:
    return _train(local_flush=False)


def train_fixed() -> float:
    return _train(local_flush=True)
