"""A Fabric loop whose SIGTERM handler saves a checkpoint on the rank it reached.

The bug (``train_buggy``): ``signal.signal(SIGTERM, handler)`` where the handler sets a
flag, and the loop, seeing its flag, calls ``fabric.save`` and stops. A scheduler's
notice reaches one node first (or only one): that rank enters ``fabric.save``'s barrier
alone while its peers train on in the gradient all-reduce: a hang until the scheduler's
SIGKILL, and no checkpoint.

In production: a preempted job is killed, not saved, and restarts from an old
checkpoint. Revealed by ``preempt@torch.backward rank=1 step=2`` (SIGTERM to one rank).

The fix (``train_fixed``): the flag is agreed at every step start (all-reduce, MAX):
every rank saves and stops at the same step.
"""

from __future__ import annotations

import signal
from typing import Any

import torch
from _loop_common import BATCH, dataset, fabric, model
from torch.utils.data import DataLoader


def _train(agree: bool) -> float:
    runner = fabric()
    stop = torch.zeros(1)

    def notice(signum: int, frame: Any) -> None:
        stop.fill_(1)

    previous = signal.signal(signal.SIGTERM, notice)
    try:
        module = model()
        net, optimizer = runner.setup(module, torch.optim.SGD(module.parameters(), lr=0.05))
        loader = runner.setup_dataloaders(DataLoader(dataset(), batch_size=BATCH))
        loss = torch.zeros(())
        for step, (x, y) in enumerate(loader):
            told = runner.all_reduce(stop.clone(), reduce_op="max") if agree else stop
            if told.item():
                runner.save("preempted.ckpt", {"model": net, "step": step})
                raise SystemExit(143)  # stopped for the scheduler: requeue the job
            loss = torch.nn.functional.mse_loss(net(x), y)
            runner.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        return float(loss.detach())
    finally:
        signal.signal(signal.SIGTERM, previous)


def train_buggy() -> float:
    return _train(agree=False)


def train_fixed() -> float:
    return _train(agree=True)
