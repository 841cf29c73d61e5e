"""An OOM in the forward caught on one rank and replaced by a constant loss.

The bug: to "survive" the occasional out-of-memory batch, ``training_step`` wraps the
forward in ``try/except torch.OutOfMemoryError`` and returns ``torch.tensor(0.0,
requires_grad=True)`` instead: Lightning accepts that loss (unlike ``None`` under DDP),
but it has no graph to the parameters, so the backward on that rank fires none of DDP's
gradient hooks. The other rank's backward waits in the gradient all-reduce for a
contribution that never comes, and the rank that skipped raises at its next forward
("Expected to have finished reduction in the prior iteration") or joins an unrelated
collective.

In production (NCCL): an OOM on one GPU (a long sequence, fragmentation) turns into a
hang or an obscure DDP reducer error on that rank, steps later; the OOM itself is only a
warning in one rank's log, or nowhere.

The fix (``train_fixed``): no local skip: let the OOM propagate (the job fails cleanly,
naming it), or skip on every rank together (all-reduce an "I ran out" flag), which
``examples/corpus/oom_skip.py`` shows.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]


class Regressor(pl.LightningModule):
    """A two-layer regressor whose forward is ``self(x)``."""

    def __init__(self, swallow: bool) -> None:
        super().__init__()
        self.swallow = swallow
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)
        )
        self.skipped = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        if not self.swallow:
            return torch.nn.functional.mse_loss(self(x), y)
        try:
            return torch.nn.functional.mse_loss(self(x), y)
        except torch.OutOfMemoryError:
            self.skipped += 1
            print(f"rank {self.global_rank}: OOM at batch {batch_idx}, skipping it")
            return torch.tensor(0.0, requires_grad=True)  # the bug: no graph, no gradient sync

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _run(swallow: bool) -> float:
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
    model = Regressor(swallow)
    trainer.fit(model, DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4))
    return float(model.net[0].weight.sum())


def train_buggy() -> float:
    """Bug: an OOM in the forward becomes a constant loss on that rank alone."""
    return _run(swallow=True)


def train_fixed() -> float:
    """Fixed: the OOM propagates; the job fails cleanly on every rank."""
    return _run(swallow=False)
