"""Correct: a sharded Fabric loop (FSDP2 through ``ModelParallelStrategy``), resumable.

Each rank holds a shard of every parameter (torch's ``fully_shard`` on each layer and the
whole model, over the strategy's data-parallel mesh). After each epoch every rank takes
part in ``fabric.save`` of a distributed checkpoint into a folder of its own
(``state-<epoch>``, a shard per rank); once every rank has written its shard, rank 0 points
``latest.txt`` at it (written aside and renamed: a crash leaves the old pointer whole). A
restarted job loads the checkpoint the pointer names with ``fabric.load`` on every rank and
goes on at the next epoch. Saving over the previous folder in place is the bug chaoslight
found in this program's first version: a crash inside a shard's write (``restarts 1`` +
``crash@torch.save rank=0 step=16``) left a folder that is no checkpoint, and the restart
failed "The path 'state' does not point to a valid checkpoint". The loader is a plain
``DataLoader`` over the program's own ``DistributedSampler``, set to each epoch: one from
``fabric.setup_dataloaders`` sets its sampler's epoch (its own, or the program's) to the
number of passes the wrapper has begun, whatever the program set, and that count starts
from 0 in a restarted job, so the resumed epoch would read epoch 0's order (found by
``restart-equivalence`` under ``restarts 1`` + ``crash@torch.backward rank=0 step=17``).

Lightning's own ``FSDPStrategy`` (FSDP1) refuses a CPU (``FSDP is only available on
GPU``, Lightning 2.6); ``ModelParallelStrategy`` builds its device mesh on the CPU and
shards over gloo, so this is the sharded Fabric program that runs here.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from _loop_common import BATCH, dataset, fabric, model
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

EPOCHS = 3
LATEST = "latest.txt"  # names the last complete checkpoint folder


def _shard(module: torch.nn.Module, mesh: Any) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard

    for layer in module.modules():
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh["data_parallel"])
    fully_shard(module, mesh=mesh["data_parallel"])
    return module


def train() -> float:
    from lightning.fabric.strategies import ModelParallelStrategy

    # Every rank in the data-parallel dimension: "auto" would make it the node count (1)
    # and leave each rank training alone on the whole data set.
    world = torch.distributed.get_world_size()
    runner = fabric(ModelParallelStrategy(_shard, data_parallel_size=world, tensor_parallel_size=1))
    net = runner.setup_module(model())
    optimizer = runner.setup_optimizers(torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9))
    # The program's own sampler, set to each epoch: a loader from ``setup_dataloaders``
    # sets its sampler's epoch to its own count of passes over it when a pass begins, which
    # starts from 0 again in a restarted job (the docstring).
    sampler: DistributedSampler[int] = DistributedSampler(dataset(), shuffle=True, seed=0)
    loader = DataLoader(sampler.dataset, batch_size=BATCH, sampler=sampler)
    state: dict[str, Any] = {"model": net, "optimizer": optimizer, "epoch": 0}
    if os.path.exists(LATEST):  # every rank sees it: the World's ranks share a directory
        with open(LATEST) as pointer:
            runner.load(pointer.read().strip(), state)
    loss = torch.zeros(())
    for epoch in range(int(state["epoch"]), EPOCHS):
        sampler.set_epoch(epoch)  # a resumed job's first epoch reads its own order
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(net(x), y)
            runner.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        state["epoch"] = epoch + 1
        folder = f"state-{epoch + 1}"
        runner.save(folder, state)  # every rank: each writes its shard
        runner.barrier()  # every shard written before the pointer moves
        if runner.global_rank == 0:
            with open(LATEST + ".tmp", "w") as pointer:
                pointer.write(folder)
            os.replace(LATEST + ".tmp", LATEST)
    return float(runner.all_reduce(loss.detach(), reduce_op="mean"))
