"""Correct: a plain DDP loop with gradient accumulation under ``no_sync``.

Four micro-batches per optimizer step: the first three run their backward inside
``net.no_sync()`` (the gradients accumulate locally, no all-reduce), the fourth outside
it, where DDP all-reduces the accumulated gradients. Each epoch's eight batches make two
whole steps, so no micro-batch is left unsynced at an epoch's end; the sampler is
reshuffled per epoch (``set_epoch``).
"""

from __future__ import annotations

import contextlib

import torch
from _loop_common import STEPS, model, sharded_loader
from torch.nn.parallel import DistributedDataParallel

ACCUMULATE = 4
EPOCHS = 2
assert STEPS % ACCUMULATE == 0, "a leftover micro-batch would never be synced"


def train() -> float:
    net = DistributedDataParallel(model())
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    loss = torch.zeros(())
    for epoch in range(EPOCHS):
        for index, (x, y) in enumerate(sharded_loader(epoch)):
            last = (index + 1) % ACCUMULATE == 0
            with contextlib.nullcontext() if last else net.no_sync():
                loss = torch.nn.functional.mse_loss(net(x), y) / ACCUMULATE
                loss.backward()
            if last:
                optimizer.step()
                optimizer.zero_grad()
    return float(loss.detach()) * ACCUMULATE
