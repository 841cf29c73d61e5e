"""A Fabric loop that catches an OOM in the forward and skips the batch on that rank.

The bug (``train_buggy``): ``try: out = model(x) except torch.cuda.OutOfMemoryError:
continue``, the handler every "robust training" blog post shows. Under DDP the rank
that skips does no backward: it never joins the step's gradient all-reduce, and its
peers' next collectives pair with the wrong partner: a hang.

In production (NCCL): the job hangs until the NCCL timeout after one long batch on one
rank. Revealed by ``oom@fabric.forward rank=1 step=0`` (an OOM probe at the forward).

The fix (``train_fixed``): every rank all-reduces whether its forward failed and all
skip together (``fabric.all_reduce(..., reduce_op="max")``).
"""

from __future__ import annotations

import torch
from _loop_common import BATCH, dataset, fabric, model
from torch.utils.data import DataLoader


def _train(agree: bool) -> float:
    runner = fabric()
    module = model()
    net, optimizer = runner.setup(module, torch.optim.SGD(module.parameters(), lr=0.05))
    loader = runner.setup_dataloaders(DataLoader(dataset(), batch_size=BATCH, shuffle=False))
    loss = torch.zeros(())
    for x, y in loader:
        failed = torch.zeros(1)
        try:
            out = net(x)
        except torch.cuda.OutOfMemoryError:
            if not agree:
                continue  # the bug: this rank alone skips the batch
            failed += 1
            out = None
        if agree and runner.all_reduce(failed, reduce_op="max").item():
            continue  # every rank skips it together
        assert out is not None
        loss = torch.nn.functional.mse_loss(out, y)
        runner.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    return float(loss.detach())


def train_buggy() -> float:
    return _train(agree=False)


def train_fixed() -> float:
    return _train(agree=True)
