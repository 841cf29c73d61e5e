"""A Fabric loop whose error handler gathers a crash report on rank 0 alone.

The bug (``train_buggy``): ``except RuntimeError:`` write a crash report, then re-raise.
The report should hold the job-wide mean loss, so rank 0 computes it with
``fabric.all_reduce`` in the handler. The error strikes one rank (an OOM, a bad batch):
on rank 0 the handler's all-reduce waits for peers that are in the step's gradient
all-reduce, and the error itself is never raised: the job hangs instead of failing.

In production (NCCL): a job that should have crashed with a clear error hangs until the
NCCL timeout, and the log shows a timeout, not the error. Revealed by
``raise@fabric.backward rank=0 step=2 exception=RuntimeError``.

The fix (``train_fixed``): no collective in an error path: each rank writes its own
report (``crash-rank<N>.json``) with what it knows, and re-raises.
"""

from __future__ import annotations

import json
from typing import Any

import torch
from _loop_common import BATCH, dataset, fabric, model
from torch.utils.data import DataLoader


def _report(runner: Any, losses: list[float], local: bool) -> None:
    rank = runner.global_rank
    mean = torch.tensor(sum(losses) / max(len(losses), 1))
    if local:
        with open(f"crash-rank{rank}.json", "w") as out:
            json.dump({"rank": rank, "steps": len(losses), "mean_loss": mean.item()}, out)
    elif rank == 0:  # the bug: a collective on one rank, in an error path
        job = runner.all_reduce(mean, reduce_op="mean")
        with open("crash.json", "w") as out:
            json.dump({"steps": len(losses), "mean_loss": job.item()}, out)


def _train(local: bool) -> float:
    runner = fabric()
    module = model()
    net, optimizer = runner.setup(module, torch.optim.SGD(module.parameters(), lr=0.05))
    loader = runner.setup_dataloaders(DataLoader(dataset(), batch_size=BATCH))
    losses: list[float] = []
    try:
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(net(x), y)
            runner.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
    except RuntimeError:
        _report(runner, losses, local)
        raise
    return losses[-1]


def train_buggy() -> float:
    return _train(local=False)


def train_fixed() -> float:
    return _train(local=True)
