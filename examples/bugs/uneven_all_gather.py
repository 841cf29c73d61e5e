"""``self.all_gather`` of per-rank tensors whose first dimension differs between ranks.

The bug: validation keeps the predictions of the *labelled* samples only (a label of -1
marks "unlabelled", which the metric ignores) and, at the end of the validation epoch,
gathers them with ``self.all_gather(torch.cat(kept))`` to compute a global rank
correlation on rank 0. Each rank has a different number of labelled samples, but
``all_gather`` needs the same shape on every rank (it allocates the receive buffers from
the local tensor's shape).

In production (NCCL): depending on the sizes, a crash in the collective ("Tensors must
have the same size"), a hang, or, worst, silently truncated / garbage values on the
receiving ranks when the byte counts happen to fit; on gloo the ranks fail in the
all-gather or get misaligned data.

The fix (``train_fixed``): gather fixed-size tensors: every rank keeps all its
predictions and a mask of the labelled ones (the same shape on every rank: Lightning's
``DistributedSampler`` pads the validation set evenly), gathers both, and filters after
the gather.
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
    """A one-layer regressor that reports a global correlation on its validation set."""

    def __init__(self, masked: bool) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.masked = masked
        self.preds: list[torch.Tensor] = []
        self.labels: list[torch.Tensor] = []
        self.correlations: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        pred = self.layer(x)
        if self.masked:
            self.preds.append(pred)
            self.labels.append(y)
        else:
            keep = y[:, 0] != -1.0  # the bug: a per-rank number of rows
            self.preds.append(pred[keep])
            self.labels.append(y[keep])

    def on_validation_epoch_end(self) -> None:
        preds = self.all_gather(torch.cat(self.preds)).reshape(-1)
        labels = self.all_gather(torch.cat(self.labels)).reshape(-1)
        self.preds.clear()
        self.labels.clear()
        keep = labels != -1.0
        stacked = torch.stack([preds[keep], labels[keep]])
        self.correlations.append(float(torch.corrcoef(stacked)[0, 1]))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _data(seed: int, unlabelled: tuple[int, ...]) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(16, 4, generator=generator)
    y = x.sum(1, keepdim=True)
    y[list(unlabelled)] = -1.0  # unlabelled samples
    return TensorDataset(x, y)


def _run(masked: bool) -> list[float]:
    pl.seed_everything(0, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=2,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Regressor(masked)
    # Validation: 16 samples, 3 unlabelled; the DistributedSampler deals 0,2,4,... to
    # rank 0 and 1,3,5,... to rank 1, so rank 0 keeps 6 and rank 1 keeps 7 (8 each masked).
    trainer.fit(
        model,
        DataLoader(_data(0, ()), batch_size=4),
        DataLoader(_data(1, (0, 2, 5)), batch_size=4),
    )
    return model.correlations


def train_buggy() -> list[float]:
    """Bug: ``all_gather`` of a tensor whose length differs per rank."""
    return _run(masked=False)


def train_fixed() -> list[float]:
    """Fixed: gather the full (evenly padded) predictions and a mask; filter after."""
    return _run(masked=True)
