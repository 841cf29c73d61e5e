"""Non-zero ranks poll for a file rank 0 writes, with a timeout and a silent fallback.

The bug: at the start of fit, rank 0 picks the learning rate (a short LR range test; a
0.1 s sleep stands for it) and writes it to ``lr.json`` atomically. The other ranks wait
for the file with a "safe" helper: poll every 20 ms, give up after 0.5 s and fall back to
the default rate, with a warning nobody reads. Whenever rank 0 is more than ~0.4 s late
(a slow file system, a busy host, a longer LR test on real data), rank 1 trains at the
default rate and rank 0 at the tuned one: the gradients are still averaged, but each
rank applies them with its own rate, so the replicas diverge from the first step.

In production: nothing fails. One slow start-up out of many gives a model whose ranks
disagree; rank 0's checkpoint is not the model the other ranks evaluated, and the run
does not reproduce.

The fix (``train_fixed``): no polling: rank 0 decides and ``trainer.strategy.broadcast``
hands the value to every rank (a collective: every rank waits as long as it takes).
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

LR_FILE = "lr.json"
DEFAULT_LR = 0.1
TUNED_LR = 0.03
TUNE_SECONDS = 0.1  # rank 0's LR range test
POLL_TIMEOUT = 0.5


def _wait_for(path: str, timeout: float) -> dict[str, float] | None:
    """Poll for ``path``; ``None`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path):
            with open(path) as handle:
                return json.load(handle)
        time.sleep(0.02)
    return None


class TuneLearningRate(pl.Callback):
    """Rank 0 picks the learning rate at fit start; every rank applies it."""

    def __init__(self, broadcast: bool) -> None:
        self.broadcast = broadcast

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        lr = DEFAULT_LR
        if trainer.is_global_zero:
            time.sleep(TUNE_SECONDS)  # stands for a short LR range test
            lr = TUNED_LR
        if self.broadcast:
            lr = trainer.strategy.broadcast(lr, src=0)
        elif trainer.is_global_zero:
            with open(LR_FILE + ".tmp", "w") as handle:
                json.dump({"lr": lr}, handle)
            os.replace(LR_FILE + ".tmp", LR_FILE)
        else:
            found = _wait_for(LR_FILE, POLL_TIMEOUT)  # the bug: a timeout and a fallback
            if found is None:
                print(f"rank {trainer.global_rank}: no {LR_FILE}, using lr={DEFAULT_LR}")
            else:
                lr = found["lr"]
        for group in trainer.optimizers[0].param_groups:
            group["lr"] = lr


class Regressor(pl.LightningModule):
    """A one-layer regressor."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=DEFAULT_LR)


def _run(broadcast: bool) -> float:
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=generator)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=2,
        callbacks=[TuneLearningRate(broadcast)],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Regressor()
    trainer.fit(model, DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4))
    return float(model.layer.weight.sum())


def train_buggy() -> float:
    """Bug: rank 1 polls for rank 0's file and silently falls back after 0.5 s."""
    return _run(broadcast=False)


def train_fixed() -> float:
    """Fixed: the learning rate is broadcast from rank 0."""
    return _run(broadcast=True)
