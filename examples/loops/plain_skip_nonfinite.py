"""A plain DDP loop that skips a batch whose loss is not finite, on the rank that saw it.

The bug (``train_buggy``): ``if not torch.isfinite(loss): continue`` before the backward,
a common guard against bad batches. A non-finite loss on one rank (a corrupt record, a
flaky GPU flipping a weight's bit) makes that rank alone skip the backward, so it never
joins the step's gradient all-reduce: its peer waits there for a partner that is already
fetching the next batch.

In production (NCCL): a hang at the first bad batch, which no test run has. Revealed by
``flip@torch.next_batch rank=0 step=1`` (the search's flip probe: the exponent bit of rank
0's first weight, so its loss alone is infinite from step 1 on).

The fix (``train_fixed``): the skip is a collective decision: each rank all-reduces "my
loss is not finite" (MAX) and every rank skips the step if any rank's was.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from _loop_common import model, sharded_loader
from torch.nn.parallel import DistributedDataParallel


def _train(agree: bool) -> float:
    net = DistributedDataParallel(model())
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    loss = torch.zeros(())
    skipped = 0
    for x, y in sharded_loader():
        loss = torch.nn.functional.mse_loss(net(x), y)
        bad = torch.tensor([0.0 if torch.isfinite(loss) else 1.0])
        if agree:
            dist.all_reduce(bad, op=dist.ReduceOp.MAX)  # every rank learns of any bad batch
        if bad.item():
            skipped += 1  # without agree, the bug: this rank alone skips the backward
            continue
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    if skipped:
        print(f"rank {dist.get_rank()} skipped {skipped} batches with a non-finite loss")
    return float(loss.detach())


def train_buggy() -> float:
    return _train(agree=False)


def train_fixed() -> float:
    return _train(agree=True)
