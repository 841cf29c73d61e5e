"""A resumable plain DDP loop that resumes mid-run with the first epoch's shuffle.

The bug (``train_buggy``): the loop calls ``sampler.set_epoch(epoch + 1)`` at the end of
each epoch, to prepare the next one's shuffle, and a restart restores the model, the
optimizer and the step from ``ckpt.pt`` (written every four steps) and skips the
batches it already trained on. The fresh sampler of the restarted job is at epoch 0:
the resumed epoch 1 is read in epoch 0's order, so the skipped batches are not the ones
trained before: some samples are trained on twice, others never, in that epoch.

In production: a requeued job silently trains on a different data stream than an
uninterrupted run (worse with large epochs and frequent preemptions). Revealed by a
restart in the second epoch, ``restarts 1`` + ``crash@torch.optimizer_step rank=0
step=13``: every rank returns, but ``restart-equivalence`` finds the restarted job
training on other samples than an uninterrupted run from the step it resumed at.

The fix (``train_fixed``): ``sampler.set_epoch(epoch)`` at the start of every epoch,
the resumed one included.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from _loop_common import BATCH, STEPS, dataset, model
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

EPOCHS = 2
EVERY = 4
PATH = "ckpt.pt"


def _save(net: DistributedDataParallel, optimizer: torch.optim.Optimizer, step: int) -> None:
    if dist.get_rank() == 0:
        state = {"model": net.module.state_dict(), "optimizer": optimizer.state_dict()}
        torch.save({**state, "step": step}, PATH + ".tmp")
        os.replace(PATH + ".tmp", PATH)
    dist.barrier()  # the checkpoint is whole before any rank goes on


def _train(set_at_start: bool) -> float:
    net = DistributedDataParallel(model())
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    data = dataset()
    sampler: DistributedSampler[int] = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=BATCH, sampler=sampler)
    done = 0
    if os.path.exists(PATH):
        state = torch.load(PATH)
        net.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        done = int(state["step"])
    loss = torch.zeros(())
    for epoch in range(done // STEPS, EPOCHS):
        if set_at_start:
            sampler.set_epoch(epoch)
        for index, (x, y) in enumerate(loader):
            step = epoch * STEPS + index
            if step < done:
                continue  # trained before the restart
            loss = torch.nn.functional.mse_loss(net(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if step % EVERY == EVERY - 1:
                _save(net, optimizer, step + 1)
        if not set_at_start:
            sampler.set_epoch(epoch + 1)  # the bug: the resumed epoch never gets its own
    return float(loss.detach())


def train_buggy() -> float:
    return _train(set_at_start=False)


def train_fixed() -> float:
    return _train(set_at_start=True)
