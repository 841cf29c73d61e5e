"""A resumable Fabric loop over a shuffled loader: a known framework issue of Lightning
Fabric 2.x (``_FabricDataLoader`` sets its sampler's epoch from its own pass count).

Shape: ``fabric.setup_dataloaders(DataLoader(data, shuffle=True))`` (Fabric replaces the
sampler with a ``DistributedSampler``), a checkpoint after every epoch with the next epoch
to train, and a job that, when restarted, loads it and goes on from that epoch, calling
``loader.sampler.set_epoch(epoch)`` as torch asks. A correct program. At every pass
Fabric's loader wrapper sets the sampler's epoch to the number of passes it has begun,
over the program's call, and in a restarted process that count starts at 0 again: the
epoch the job resumed at reads epoch 0's order. Nothing fails: the restarted job trains
on other samples than an uninterrupted one.

``chaoslight fuzz`` finds it under a crash and a restart (``restart-equivalence``) and
reports it apart as Fabric's known issue::

    restarts 1
    crash@torch.backward rank=0 step=12

``train_fixed`` follows the workaround: a loader Fabric does not wrap (the program's own
``DistributedSampler`` over the ranks Fabric launched, ``set_epoch`` at each epoch, batches
moved with ``fabric.to_device``).
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

EPOCHS = 3
PATH = "state.pt"


def _data() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=generator)
    return TensorDataset(x, x.sum(1, keepdim=True))


def _train(workaround: bool) -> float:
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator="cpu", devices=dist.get_world_size(), strategy="ddp")
    fabric.launch()
    torch.manual_seed(0)
    module = torch.nn.Linear(8, 1)
    net, optimizer = fabric.setup(module, torch.optim.SGD(module.parameters(), lr=0.05))
    data = _data()
    sampler: Any = None
    if workaround:
        sampler = DistributedSampler(
            data, num_replicas=fabric.world_size, rank=fabric.global_rank, shuffle=True, seed=0
        )
        loader: Any = DataLoader(data, batch_size=4, sampler=sampler)
    else:
        loader = fabric.setup_dataloaders(DataLoader(data, batch_size=4, shuffle=True))
        sampler = loader.sampler  # Fabric's DistributedSampler
    state: dict[str, Any] = {"model": net, "optimizer": optimizer, "epoch": 0}
    if os.path.exists(PATH):
        fabric.load(PATH, state)
    loss = torch.zeros(())
    for epoch in range(int(state["epoch"]), EPOCHS):
        sampler.set_epoch(epoch)  # without the workaround, Fabric's pass count wins
        for batch in loader:
            x, y = fabric.to_device(batch) if workaround else batch
            loss = torch.nn.functional.mse_loss(net(x), y)
            fabric.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        state["epoch"] = epoch + 1
        fabric.save(PATH + ".tmp", state)  # every rank calls it; rank 0 writes
        fabric.barrier()
        if fabric.global_rank == 0:
            os.replace(PATH + ".tmp", PATH)  # a crash mid-write leaves the last one whole
        fabric.barrier()
    return float(fabric.all_reduce(loss.detach(), reduce_op="mean"))


def train() -> float:
    """A correct program: the resumed epoch reads epoch 0's order (Fabric's bug)."""
    return _train(workaround=False)


def train_fixed() -> float:
    """The workaround: a loader of the program's own, its sampler set to each epoch."""
    return _train(workaround=True)
