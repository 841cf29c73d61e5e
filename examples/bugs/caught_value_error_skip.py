"""A bad record caught on one rank: that rank skips the batch alone.

The bug: ``training_step`` parses each batch of raw records (``parse_records`` raises
``ValueError`` on a record out of range: a corrupt row, a failed decode) inside
``try/except ValueError`` around the forward, and skips the batch (manual optimization:
no backward, no optimizer step). A bad record is data: it sits in one rank's shard, so one
rank skips while its peers do a backward and wait in DDP's gradient all-reduce for it. The
ranks' collectives pair up one step apart, the replicas part, and the last all-reduce (or
Lightning's next broadcast) has no partner: a hang, or gloo aborts a peer.

In production (NCCL): the job trains for days on clean data, then one corrupt row on one
node hangs it until the NCCL timeout, with the skip a one-line print in one rank's log.
The fault-free data here has no bad record, so a plain run never shows it; the default
search reads the ``except ValueError`` around ``self(x)`` and raises a ValueError there,
on one rank.

The fix (``train_fixed``): a skip is a collective decision. Each rank puts "my batch was
bad" into a flag and the ranks all-reduce it with MAX; if any rank's batch was bad, every
rank skips it: nobody does a backward, nobody waits, the weights stay equal everywhere.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]

LIMIT = 1e3  # a feature beyond it is a corrupt record


def parse_records(raw: torch.Tensor) -> torch.Tensor:
    """The records as features; ValueError when one is corrupt (non-finite or too large)."""
    if not bool(torch.isfinite(raw).all()) or bool((raw.abs() > LIMIT).any()):
        raise ValueError("corrupt record in batch")
    return raw.float()


class RecordRegressor(pl.LightningModule):
    """A two-layer regressor over parsed records; a batch with a bad record is skipped."""

    def __init__(self, agree: bool) -> None:
        super().__init__()
        self.automatic_optimization = False  # a skip must also skip backward and step
        self.agree = agree
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)
        )
        self.skipped = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor | None:
        raw, y = batch
        try:
            prediction = self(parse_records(raw))
        except ValueError:
            prediction = None  # a bad record: skip this batch
        skip = prediction is None
        if self.agree and dist.is_available() and dist.is_initialized():
            flag = torch.tensor([int(skip)], dtype=torch.int32)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # any rank's batch bad: all skip
            skip = bool(flag.item())
        if skip or prediction is None:
            self.skipped += 1
            print(f"rank {self.global_rank}: bad record at batch {batch_idx}, skipping it")
            return None
        optimizer: Any = self.optimizers()
        loss = torch.nn.functional.mse_loss(prediction, y)
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()
        return loss.detach()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _run(agree: bool) -> int:
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    raw = torch.randn(32, 4, generator=generator)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = RecordRegressor(agree)
    data = TensorDataset(raw, raw.sum(1, keepdim=True))
    trainer.fit(model, DataLoader(data, batch_size=4))
    return model.skipped


def train_buggy() -> int:
    """Bug: the rank whose batch holds a bad record skips it alone."""
    return _run(agree=False)


def train_fixed() -> int:
    """Fixed: the ranks agree (all-reduce MAX) before skipping a batch."""
    return _run(agree=True)
