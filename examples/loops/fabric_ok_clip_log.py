"""Correct: a Fabric loop with dropout, gradient clipping, a per-step schedule and a logger.

Two epochs over a shuffled loader; ``fabric.clip_gradients`` clips the norm of the
all-reduced gradients (every rank alike), a ``OneCycleLR`` steps after every optimizer
step, and ``fabric.log_dict`` writes the loss and learning rate to a CSV logger (rank 0's
file, as Fabric's loggers do). Dropout draws from the global RNG, seeded alike on every
rank by ``fabric.seed_everything``.
"""

from __future__ import annotations

import torch
from _loop_common import BATCH, dataset, fabric
from torch.utils.data import DataLoader

EPOCHS = 2


def train() -> float:
    from lightning.fabric.loggers import CSVLogger

    runner = fabric(loggers=CSVLogger("logs", name="clip"))
    runner.seed_everything(0, verbose=False)
    module = torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(32, 1)
    )
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-2, weight_decay=1e-4)
    net, optimizer = runner.setup(module, optimizer)
    loader = runner.setup_dataloaders(DataLoader(dataset(), batch_size=BATCH, shuffle=True))
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=1e-2, total_steps=EPOCHS * len(loader)
    )
    loss = torch.zeros(())
    step = 0
    for _ in range(EPOCHS):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(net(x), y)
            runner.backward(loss)
            runner.clip_gradients(net, optimizer, max_norm=1.0)
            optimizer.step()
            optimizer.zero_grad()
            schedule.step()
            runner.log_dict({"loss": loss.item(), "lr": schedule.get_last_lr()[0]}, step=step)
            step += 1
    runner.logger.finalize("success")
    return float(runner.all_reduce(loss.detach(), reduce_op="mean"))
