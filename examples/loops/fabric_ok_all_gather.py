"""Correct: a Fabric loop that evaluates every four steps and gathers the errors.

Each rank evaluates its shard of a held-out set (the shards are of equal size:
``setup_dataloaders`` gives each rank its part, padded); ``fabric.all_gather`` brings
every rank's per-sample errors together (same shape on every rank), and every rank
computes the same job-wide 90th percentile. Rank 0 alone appends it to
``metrics.jsonl``: a file write, not a collective. A barrier ends the run.
"""

from __future__ import annotations

import json

import torch
from _loop_common import BATCH, dataset, fabric, model
from torch.utils.data import DataLoader, Subset

EVERY = 4


def train() -> float:
    runner = fabric()
    module = model()
    net, optimizer = runner.setup(module, torch.optim.Adam(module.parameters(), lr=1e-2))
    data = dataset(88)  # 64 samples to train on, 24 held out
    train_loader, eval_loader = runner.setup_dataloaders(
        DataLoader(Subset(data, range(64)), batch_size=BATCH, shuffle=True),
        DataLoader(Subset(data, range(64, 88)), batch_size=BATCH),
    )
    p90 = float("nan")
    for step, (x, y) in enumerate(train_loader):
        runner.backward(torch.nn.functional.mse_loss(net(x), y))
        optimizer.step()
        optimizer.zero_grad()
        if step % EVERY == EVERY - 1:
            with torch.no_grad():
                errors = torch.cat([(net(ex) - ey).abs().flatten() for ex, ey in eval_loader])
            gathered = runner.all_gather(errors)  # (world size, samples per rank)
            p90 = float(torch.quantile(gathered.flatten(), 0.9))
            if runner.global_rank == 0:
                with open("metrics.jsonl", "a") as out:
                    out.write(json.dumps({"step": step, "p90_error": p90}) + "\n")
    runner.barrier()
    return p90
