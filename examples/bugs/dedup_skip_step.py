"""An optimizer step skipped, on one rank, for a batch that rank has already trained on.

The bug: a storage layer that retries a failed read can hand the loader the same records
twice, so the model (manual optimization) keeps the ids it trained on this epoch and
skips the optimizer step for a batch of records it has seen, "so a re-delivered batch
does not count twice". The decision is the rank's own: when one rank's read repeats
(``repeat_batch@lightning.next_batch``), that rank skips its step while the others take
theirs. The backward ran on every rank (DDP averaged the gradients, nothing hangs), but
from then on the replicas differ: every rank trains a different model.

In production: nothing fails; rank 0's checkpoint is not the model the other ranks
trained, and the logged (synced) losses average over models that drifted apart.

The fix (``train_fixed``): decide together (``strategy.reduce_boolean_decision``: a
repeat on any rank makes every rank skip that step), so the replicas stay equal.
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


class DedupRegressor(pl.LightningModule):
    """A one-layer regressor that skips the step for a batch of records seen this epoch."""

    def __init__(self, agreed: bool) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.automatic_optimization = False
        self.agreed = agreed
        self.seen: set[int] = set()

    def on_train_epoch_start(self) -> None:
        self.seen = set()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, ids = batch
        optimizer = self.optimizers()
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        optimizer.zero_grad()
        self.manual_backward(loss)
        fresh = not set(ids.tolist()) <= self.seen
        self.seen |= set(ids.tolist())
        if self.agreed:  # every rank steps only if every rank's batch was fresh
            fresh = self.trainer.strategy.reduce_boolean_decision(fresh, all=True)
        if fresh:  # the bug (agreed=False): this rank's records alone decide
            optimizer.step()
        return loss.detach()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _run(agreed: bool) -> float:
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=generator)
    data = TensorDataset(x, x.sum(1, keepdim=True), torch.arange(32))
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
    model = DedupRegressor(agreed)
    trainer.fit(model, DataLoader(data, batch_size=4))
    return float(model.layer.weight.sum())


def train_buggy() -> float:
    """Bug: a rank skips its optimizer step for a repeated batch on its own."""
    return _run(agreed=False)


def train_fixed() -> float:
    """Fixed: the ranks agree on the skip, so every rank steps or skips together."""
    return _run(agreed=True)
