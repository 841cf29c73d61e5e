"""Correct: a Fabric loop that validates every three steps and keeps the best model.

Validation runs on every rank's shard; the mean loss is all-reduced, so every rank
decides alike whether the model is the best so far, and every rank calls
``fabric.save`` (collective) for it.
"""

from __future__ import annotations

import torch
from _loop_common import BATCH, dataset, fabric, model
from torch.utils.data import DataLoader

EVERY = 3


def train() -> float:
    runner = fabric()
    module = model()
    net, optimizer = runner.setup(module, torch.optim.Adam(module.parameters(), lr=1e-2))
    train_loader, val_loader = runner.setup_dataloaders(
        DataLoader(dataset(), batch_size=BATCH, shuffle=True),
        DataLoader(dataset(16), batch_size=BATCH),
    )
    best = float("inf")
    for step, (x, y) in enumerate(train_loader):
        loss = torch.nn.functional.mse_loss(net(x), y)
        runner.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        if step % EVERY == EVERY - 1:
            with torch.no_grad():
                losses = [torch.nn.functional.mse_loss(net(vx), vy) for vx, vy in val_loader]
            mean = float(runner.all_reduce(torch.stack(losses).mean(), reduce_op="mean"))
            if mean < best:
                best = mean
                runner.save("best.ckpt", {"model": net, "val_loss": mean})
    return best
