"""A resumable Fabric loop whose checkpoint forgets the learning-rate scheduler.

The bug (``train_buggy``): every three steps ``fabric.save(path, state)`` with the model,
the optimizer and the step, and a restarted job ``fabric.load``s it and goes on from
that step. The ``StepLR`` scheduler is not in ``state``: after a restart it starts over,
the learning rate jumps back to its first value, and the resumed job trains with a
schedule no uninterrupted run has. Nothing fails: the loss curve only bends.

In production: a preempted and requeued job ends worse than an uninterrupted one, and
only a comparison of the two shows why. Revealed by a restart,
``restarts 1`` + ``crash@torch.optimizer_step rank=0 step=7``: every rank returns, but
``restart-equivalence`` finds the learning rate of the restarted job's steps differing
from an uninterrupted run's.

The fix (``train_fixed``): the scheduler is in ``state`` (Fabric saves and restores
every object with ``state_dict``/``load_state_dict``).
"""

from __future__ import annotations

import os
from typing import Any

import torch
from _loop_common import dataset, fabric, model
from torch.utils.data import DataLoader

PATH = "resume.ckpt"
EVERY = 3


def _train(keep_scheduler: bool) -> float:
    runner = fabric()
    module = model()
    sgd = torch.optim.SGD(module.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(sgd, step_size=4, gamma=0.5)
    net, optimizer = runner.setup(module, sgd)
    state: dict[str, Any] = {"model": net, "optimizer": optimizer, "step": 0}
    if keep_scheduler:
        state["scheduler"] = scheduler  # the bug is its absence
    if os.path.exists(PATH):
        runner.load(PATH, state)  # restores in place; "step" is replaced
    loader = runner.setup_dataloaders(DataLoader(dataset(), batch_size=2))
    loss = torch.zeros(())
    for step, (x, y) in enumerate(loader):
        if step < state["step"]:
            continue  # trained before the restart
        loss = torch.nn.functional.mse_loss(net(x), y)
        runner.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
        if step % EVERY == EVERY - 1:
            state["step"] = step + 1
            runner.save(PATH, state)  # every rank calls it; rank 0 writes
    return float(loss.detach())


def train_buggy() -> float:
    return _train(keep_scheduler=False)


def train_fixed() -> float:
    return _train(keep_scheduler=True)
