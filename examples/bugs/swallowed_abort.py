"""A training step that catches the error of a failed metric sync and carries on.

The bug: the step logs a metric averaged over the ranks (``self.log(...,
sync_dist=True)``) inside ``try: ... except RuntimeError:``, so that "a flaky metrics
sync cannot kill a week-long run". When the rank's process group is aborted (NCCL's
async error handling after a link flap, a peer's failure, ``ProcessGroupNCCL.abort()``),
that sync raises, the step swallows the error and goes on, and the rank fails a moment
later in DDP's gradient all-reduce with a transport error that names nothing: the report
blames the network, or the peer, and the abort that caused it is lost.

In production: the job still dies, but its log points at the wrong rank and the wrong
call; restarts meet the same abort and nobody knows why.

The fix (``train_fixed``): let the collective's error raise (catch only what the step
itself can handle): the rank ends with the aborted group's own error.
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


class Classifier(pl.LightningModule):
    """A linear classifier that logs its accuracy averaged over the ranks."""

    def __init__(self, best_effort_sync: bool) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)
        self.best_effort_sync = best_effort_sync

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self.layer(x)
        accuracy = (logits.argmax(1) == y).float().mean()
        if self.best_effort_sync:
            try:  # the bug: the aborted group's error is swallowed here
                self.log("accuracy", accuracy, sync_dist=True)
            except RuntimeError as error:
                print(f"rank {self.global_rank}: metric sync failed ({error}); going on")
        else:
            self.log("accuracy", accuracy, sync_dist=True)
        return torch.nn.functional.cross_entropy(logits, y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _run(best_effort_sync: bool) -> float:
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=generator)
    y = (x.sum(1) > 0).long()
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
    model = Classifier(best_effort_sync)
    trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=4))
    return float(model.layer.weight.sum())


def train_buggy() -> float:
    """Bug: the metric sync's error is caught and the step goes on."""
    return _run(best_effort_sync=True)


def train_fixed() -> float:
    """Fixed: the metric sync's error ends the rank."""
    return _run(best_effort_sync=False)
