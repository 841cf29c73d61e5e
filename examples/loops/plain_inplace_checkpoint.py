"""A resumable plain DDP loop that writes its checkpoint in place.

The bug (``train_buggy``): every two steps rank 0 ``torch.save``s the model and
optimizer straight to ``last.pt``; a restarted job resumes from it. A crash while the
file is being written (a preemption's SIGKILL, a node failure) leaves it half written:
the restarted job cannot read it, and the run's progress is lost for good.

In production: a requeued job dies at start with ``RuntimeError: PytorchStreamReader
failed reading zip archive``. Revealed by ``crash@torch.save`` and one restart (a probe
the search tries: a crash inside each ``torch.save``, then a restart).

The fix (``train_fixed``): write to ``last.pt.tmp`` and ``os.replace`` it onto
``last.pt``: the file is the old one or the new one, never half of one.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from _loop_common import model, sharded_loader
from torch.nn.parallel import DistributedDataParallel

PATH = "last.pt"


def _save(state: dict[str, object], atomic: bool) -> None:
    if not atomic:
        torch.save(state, PATH)  # the bug: a crash here leaves half a file
        return
    torch.save(state, PATH + ".tmp")
    os.replace(PATH + ".tmp", PATH)


def _train(atomic: bool) -> float:
    net = DistributedDataParallel(model())
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    start = 0
    if os.path.exists(PATH):
        state = torch.load(PATH)
        net.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = int(state["step"])
    loss = torch.zeros(())
    for step, (x, y) in enumerate(sharded_loader()):
        if step < start:
            continue  # trained before the restart
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % 2 == 1:
            if dist.get_rank() == 0:
                state = {"model": net.module.state_dict(), "optimizer": optimizer.state_dict()}
                _save({**state, "step": step + 1}, atomic)
            dist.barrier()  # every rank's checkpoint is written before it goes on
    return float(loss.detach())


def train_buggy() -> float:
    return _train(atomic=False)


def train_fixed() -> float:
    return _train(atomic=True)
