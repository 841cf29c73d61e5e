"""Correct: a plain DDP loop under bf16 autocast, with clipping and an evaluation per epoch.

Each epoch trains under ``torch.autocast("cpu", dtype=torch.bfloat16)`` with AdamW, a
cosine schedule stepped per epoch and ``clip_grad_norm_`` on the (already all-reduced)
gradients; then every rank evaluates its shard of a held-out set and all-reduces
``[sum of squared errors, count]``; rank 0 appends the epoch's metrics to a JSON-lines
file and saves the best model (atomically), and a barrier keeps the others from racing
ahead into a file they never read anyway.
"""

from __future__ import annotations

import json
import os

import torch
import torch.distributed as dist
from _loop_common import BATCH, dataset, model, sharded_loader
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

EPOCHS = 3


def _evaluate(net: torch.nn.Module) -> float:
    held_out = dataset(32)
    loader = DataLoader(
        held_out, batch_size=BATCH, sampler=DistributedSampler(held_out, shuffle=False)
    )
    totals = torch.zeros(2)
    with torch.no_grad():
        for x, y in loader:
            totals += torch.stack([((net(x) - y) ** 2).sum(), torch.tensor(float(len(y)))])
    dist.all_reduce(totals)
    return float(totals[0] / totals[1])


def train() -> float:
    net = DistributedDataParallel(model())
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-2)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS)
    best = float("inf")
    for epoch in range(EPOCHS):
        for x, y in sharded_loader(epoch):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = torch.nn.functional.mse_loss(net(x).float(), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), max_norm=1.0)
            optimizer.step()
            optimizer.zero_grad()
        schedule.step()
        error = _evaluate(net)  # every rank: it all-reduces
        if dist.get_rank() == 0:
            with open("metrics.jsonl", "a") as log:
                log.write(json.dumps({"epoch": epoch, "mse": error}) + "\n")
            if error < best:
                torch.save(net.module.state_dict(), "best.pt.tmp")
                os.replace("best.pt.tmp", "best.pt")
        best = min(best, error)
        dist.barrier()
    return best
