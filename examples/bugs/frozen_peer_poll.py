"""Rank 1 waits for a file rank 0 writes at each epoch end, polling with no deadline.

The bug: at the end of every epoch rank 0 exports a summary (``summary-<epoch>.json``)
and the other ranks read it to decide on the next epoch's learning rate. They wait for the
file in a loop, ``while not os.path.exists(path): time.sleep(0.05)``, with no deadline.
Whenever rank 0 stops making progress before it writes the file (its host paused, a
thread stuck in native code holding the GIL, a SIGSTOP from a debugger or the OOM
killer's neighbour thrashing), rank 1 waits forever.

In production: the job neither fails nor progresses. NCCL's watchdog and the process
group's timeout end a rank blocked in a collective, but rank 1 is not in one: it sleeps in
a Python loop, and the job holds its GPUs until someone notices.

The fix (``train_fixed``): rank 0 writes the file and every rank meets in
``trainer.strategy.barrier()`` before reading it: a collective, which the process group's
timeout ends when a rank never arrives.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]


class Regressor(pl.LightningModule):
    """A one-layer regressor whose ranks share an epoch summary through a file."""

    def __init__(self, barrier: bool) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.barrier = barrier

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def on_train_epoch_end(self) -> None:
        path = f"summary-{self.current_epoch}.json"
        if self.trainer.is_global_zero:
            with open(path + ".tmp", "w") as handle:
                json.dump({"lr": 0.1 / (self.current_epoch + 1)}, handle)
            os.replace(path + ".tmp", path)
        if self.barrier:
            self.trainer.strategy.barrier("summary")  # the fix: a collective, with a timeout
        while not os.path.exists(path):  # the bug, in train_buggy: no deadline
            time.sleep(0.05)
        with open(path) as handle:
            lr = json.load(handle)["lr"]
        for group in self.trainer.optimizers[0].param_groups:
            group["lr"] = lr

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _run(barrier: bool) -> float:
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=generator)
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
    model = Regressor(barrier)
    trainer.fit(model, DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4))
    return float(model.layer.weight.sum())


def train_buggy() -> float:
    """Bug: rank 1 polls for rank 0's file with no deadline."""
    return _run(barrier=False)


def train_fixed() -> float:
    """Fixed: the ranks meet in a barrier before reading the file."""
    return _run(barrier=True)
