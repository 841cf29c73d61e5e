"""A Fabric loop that all-reduces its loss only at a loss spike.

The bug (``train_buggy``): a spike monitor logs the job-wide loss when the loss jumps:
``if loss > SPIKE * average: fabric.all_reduce(loss, reduce_op="mean")``. The condition
is the rank's own loss: a spike on one rank (a bad batch, a flaky GPU) sends that rank
alone into the all-reduce, where its peers never come: they are in the next step's
gradient all-reduce in ``fabric.backward``, and the collectives pair up wrongly.

In production (NCCL): a hang at the first loss spike, which a healthy run never has, so
no test run shows it. Revealed by ``flip@fabric.forward rank=0 step=2`` (a flaky GPU
flips a bit of one weight on rank 0: its loss alone spikes), or
``corrupt@fabric.forward rank=0 step=3 value=inf``.

The fix (``train_fixed``): all-reduce the loss on every step, on every rank, and decide
on the reduced value: every rank sees the same spike.
"""

from __future__ import annotations

import torch
from _loop_common import BATCH, dataset, fabric, model
from torch.utils.data import DataLoader

SPIKE = 4.0  # a loss this many times the running average is a spike


def _train(every_step: bool) -> float:
    runner = fabric()
    module = model()
    net, optimizer = runner.setup(module, torch.optim.SGD(module.parameters(), lr=0.05))
    loader = runner.setup_dataloaders(DataLoader(dataset(), batch_size=BATCH, shuffle=True))
    average: float | None = None
    loss = torch.zeros(())
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(net(x), y)
        runner.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        value = loss.detach()
        if every_step:
            value = runner.all_reduce(value, reduce_op="mean")  # every rank, every step
        if average is not None and value.item() > SPIKE * average:
            if not every_step:  # the bug: a collective under a rank-local condition
                value = runner.all_reduce(value, reduce_op="mean")
            runner.print(f"loss spike: job-wide mean loss {value.item():.3g}")  # rank 0's
        average = value.item() if average is None else 0.9 * average + 0.1 * value.item()
    return float(loss.detach())


def train_buggy() -> float:
    return _train(every_step=False)


def train_fixed() -> float:
    return _train(every_step=True)
