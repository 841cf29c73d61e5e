"""Oversampling a rare class with ``WeightedRandomSampler`` (sampling with replacement).

Shape: an imbalanced binary data set (8 positives among 64); the train loader uses a
``WeightedRandomSampler(replacement=True)`` so that each batch is balanced on average.
Under DDP, Lightning wraps the custom sampler in its ``DistributedSamplerWrapper``: the
weighted draw is made on every rank (the same, from the seeded global generator) and the
drawn positions are split between the ranks.

Why it is correct: each rank gets a disjoint, equally long share of the *draws*; a rare
sample drawn several times may land on both ranks, which is what oversampling means,
not a sharding bug. The gradients are all-reduced as usual.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]


def make_data(n: int = 64, positives: int = 8) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    labels = torch.zeros(n, dtype=torch.long)
    labels[:positives] = 1
    features = torch.randn(n, 4, generator=generator) + labels[:, None].float()
    return TensorDataset(features, labels)


class Classifier(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        features, labels = batch
        return torch.nn.functional.cross_entropy(self.layer(features), labels)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def train() -> None:
    """Fit two epochs on a class-balanced weighted draw."""
    pl.seed_everything(0, verbose=False)
    data = make_data()
    labels = data.tensors[1]
    counts = torch.bincount(labels).double()
    weights = (1.0 / counts)[labels]
    sampler = WeightedRandomSampler(weights.tolist(), num_samples=len(labels), replacement=True)
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
    trainer.fit(Classifier(), DataLoader(data, batch_size=8, sampler=sampler))


if __name__ == "__main__":
    train()
