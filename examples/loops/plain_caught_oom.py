"""A plain DDP loop that skips its step on the rank that runs out of memory.

The bug (``train_buggy``): ``try: loss.backward() except torch.cuda.OutOfMemoryError:``
zero the gradients and ``continue``. An OOM strikes one rank (its batch is the longest,
its memory the most fragmented): that rank skips the step alone, never joins the step's
gradient all-reduce, and the ranks' collectives pair up one step apart until one waits
for a partner that never comes: a hang, or gloo aborting on a size mismatch.

In production (NCCL): the job hangs until the NCCL timeout, hours later, with one line
in one rank's log. Revealed by ``oom@torch.backward rank=0 step=1`` (the search reads
the ``except`` around the backward and raises it there).

The fix (``train_fixed``): a skip is a collective decision. Each rank all-reduces "my
step failed" (MAX) after the backward; if any rank's did, every rank drops the step.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from _loop_common import model, sharded_loader
from torch.nn.parallel import DistributedDataParallel


def _train(agree: bool) -> float:
    net = DistributedDataParallel(model())
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    loss = torch.zeros(())
    for x, y in sharded_loader():
        failed = torch.zeros(1)
        try:
            loss = torch.nn.functional.mse_loss(net(x), y)
            loss.backward()
        except torch.cuda.OutOfMemoryError:
            optimizer.zero_grad()
            if not agree:
                continue  # the bug: this rank alone skips the step
            failed += 1
        if agree:
            dist.all_reduce(failed, op=dist.ReduceOp.MAX)
            if failed.item():
                optimizer.zero_grad()  # every rank drops the step together
                continue
        optimizer.step()
        optimizer.zero_grad()
    return float(loss.detach())


def train_buggy() -> float:
    return _train(agree=False)


def train_fixed() -> float:
    return _train(agree=True)
