"""Correct: a Fabric loop with gradient accumulation, syncing only on the last micro-batch.

Four micro-batches per optimizer step; the first three run their backward under
``fabric.no_backward_sync(model)`` (no gradient all-reduce), the fourth syncs. A step in
chaoslight's count is the loop's optimizer step: four backwards each.
"""

from __future__ import annotations

import torch
from _loop_common import BATCH, dataset, fabric, model
from torch.utils.data import DataLoader

ACCUMULATE = 4


def train() -> float:
    runner = fabric()
    module = model()
    net, optimizer = runner.setup(module, torch.optim.SGD(module.parameters(), lr=0.05))
    loader = runner.setup_dataloaders(DataLoader(dataset(), batch_size=BATCH))
    loss = torch.zeros(())
    for index, (x, y) in enumerate(loader):
        last = (index + 1) % ACCUMULATE == 0
        with runner.no_backward_sync(net, enabled=not last):
            loss = torch.nn.functional.mse_loss(net(x), y) / ACCUMULATE
            runner.backward(loss)
        if last:
            optimizer.step()
            optimizer.zero_grad()
    return float(runner.all_reduce(loss.detach(), reduce_op="mean"))
