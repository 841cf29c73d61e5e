"""A plain DDP loop whose SIGTERM handler saves and waits in a barrier, on its own rank.

The bug (``train_buggy``): the handler ``signal.signal(SIGTERM, emergency)`` saves an
emergency checkpoint (rank 0 writes it) and calls ``dist.barrier()`` so that no rank
exits before the file is whole, then exits 143. A scheduler's notice reaches the ranks
at different moments, or one node only: the rank it reached runs its handler in the
middle of its step and waits in the barrier while its peers are in the gradient
all-reduce; the collectives pair up wrongly, and nothing is saved.

In production: a preempted job hangs until the scheduler's SIGKILL (or the NCCL
timeout), and its requeued run starts from an old checkpoint. Revealed by
``preempt@torch.backward rank=1 step=2`` (SIGTERM to one rank).

The fix (``train_fixed``): the handler only sets a flag; every step begins with an
all-reduce (MAX) of the flags, so every rank sees the notice at the same step, saves
there together and exits 143.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import torch
import torch.distributed as dist
from _loop_common import model, sharded_loader
from torch.nn.parallel import DistributedDataParallel

PATH = "emergency.pt"


def _emergency_save(net: DistributedDataParallel) -> None:
    if dist.get_rank() == 0:
        torch.save(net.module.state_dict(), PATH + ".tmp")
        os.replace(PATH + ".tmp", PATH)
    dist.barrier()  # no rank exits before the file is whole


def _train(agree: bool) -> float:
    net = DistributedDataParallel(model())
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    notice = torch.zeros(1)

    def on_sigterm(signum: int, frame: Any) -> None:
        if agree:
            notice.fill_(1)  # acted on at the next step, by every rank together
            return
        _emergency_save(net)  # the bug: a collective, on this rank only, mid-step
        raise SystemExit(143)

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        loss = torch.zeros(())
        for x, y in sharded_loader():
            if agree:
                told = notice.clone()
                dist.all_reduce(told, op=dist.ReduceOp.MAX)
                if told.item():
                    _emergency_save(net)
                    raise SystemExit(143)  # stopped for the scheduler: requeue the job
            loss = torch.nn.functional.mse_loss(net(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        return float(loss.detach())
    finally:
        signal.signal(signal.SIGTERM, previous)


def train_buggy() -> float:
    return _train(agree=False)


def train_fixed() -> float:
    return _train(agree=True)
