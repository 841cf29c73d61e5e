"""A plain DDP loop over epochs whose shuffled loader reads the same order every epoch.

The bug (``train_buggy``): the loader's ``DistributedSampler(shuffle=True)`` draws its
permutation from its seed and its epoch, and the loop never calls
``sampler.set_epoch(epoch)`` (torch does not; a Trainer, and a loader of Fabric's
``setup_dataloaders``, would). Every epoch each rank trains on the same samples in the
same order: the shuffle the program asked for happens once.

In production: a model trained for many epochs sees its data in one fixed order, which
costs accuracy in ways no loss curve explains. Revealed with no fault: ``data-order``
finds the second epoch drawn from the same sampler state as the first.

The fix (``train_fixed``): ``sampler.set_epoch(epoch)`` at the start of each epoch, as
torch's documentation of ``DistributedSampler`` asks.
"""

from __future__ import annotations

import torch
from _loop_common import BATCH, dataset, model
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

EPOCHS = 3


def _train(set_epoch: bool) -> float:
    net = DistributedDataParallel(model())
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    data = dataset()
    sampler: DistributedSampler[int] = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=BATCH, sampler=sampler)
    loss = torch.zeros(())
    for epoch in range(EPOCHS):
        if set_epoch:
            sampler.set_epoch(epoch)
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(net(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    return float(loss.detach())


def train_buggy() -> float:
    return _train(set_epoch=False)


def train_fixed() -> float:
    return _train(set_epoch=True)
