"""A Fabric loop that saves its checkpoint from rank 0 only.

The bug (``train_buggy``): ``if fabric.global_rank == 0: fabric.save(path, state)``,
written as one would for ``torch.save``. ``fabric.save`` is collective under DDP (every
rank calls it; rank 0 writes, then all wait in a barrier): rank 0 waits there for peers
that never come, and the peers' next collective meets rank 0's barrier.

In production: the job hangs at its first checkpoint. Shows with no fault.

The fix (``train_fixed``): every rank calls ``fabric.save``.
"""

from __future__ import annotations

import torch
from _loop_common import BATCH, dataset, fabric, model
from torch.utils.data import DataLoader


def _train(everyone: bool) -> float:
    runner = fabric()
    module = model()
    net, optimizer = runner.setup(module, torch.optim.SGD(module.parameters(), lr=0.05))
    loader = runner.setup_dataloaders(DataLoader(dataset(), batch_size=BATCH))
    loss = torch.zeros(())
    for step, (x, y) in enumerate(loader):
        loss = torch.nn.functional.mse_loss(net(x), y)
        runner.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        if step % 4 == 3 and (everyone or runner.global_rank == 0):
            runner.save("last.ckpt", {"model": net, "optimizer": optimizer, "step": step})
    return float(loss.detach())


def train_buggy() -> float:
    return _train(everyone=False)


def train_fixed() -> float:
    return _train(everyone=True)
