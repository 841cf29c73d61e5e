"""Correct: a plain DDP loop over epochs, resumable, its sampler reshuffled per epoch.

Every rank saves nothing; rank 0 writes ``state.pt`` atomically after each epoch (model,
optimizer, scheduler, the next epoch), behind a barrier; a restarted job resumes at the
next epoch with the same shuffle a run without the restart would have had
(``DistributedSampler.set_epoch``).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from _loop_common import model, sharded_loader
from torch.nn.parallel import DistributedDataParallel

EPOCHS = 3
PATH = "state.pt"


def train() -> float:
    net = DistributedDataParallel(model())
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    first = 0
    if os.path.exists(PATH):
        state = torch.load(PATH)
        net.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        first = int(state["epoch"])
    loss = torch.zeros(())
    for epoch in range(first, EPOCHS):
        for x, y in sharded_loader(epoch):
            loss = torch.nn.functional.mse_loss(net(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        scheduler.step()
        if dist.get_rank() == 0:
            state = {
                "model": net.module.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "epoch": epoch + 1,
            }
            torch.save(state, PATH + ".tmp")
            os.replace(PATH + ".tmp", PATH)
        dist.barrier()
    return float(loss.detach())
