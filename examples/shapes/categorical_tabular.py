"""Tabular data with a few categorical (one-hot) features: many identical rows.

Shape: 64 customers described by two categorical columns (3 and 2 categories), one-hot
encoded into a 5-wide float vector; the target is a fixed score per combination plus
per-customer noise. Only 6 distinct input rows exist, so different samples often have the
very same features, as in most real tabular data sets.

Why it is correct: Lightning's ``DistributedSampler`` gives each rank a disjoint set of
*samples* (indices) of equal size; that two different customers share their features does
not make them the same sample. Nothing depends on the rank.
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


def make_data(n: int = 64) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    region = torch.randint(0, 3, (n,), generator=generator)
    plan = torch.randint(0, 2, (n,), generator=generator)
    features = torch.cat(
        [torch.nn.functional.one_hot(region, 3), torch.nn.functional.one_hot(plan, 2)], dim=1
    ).float()
    score = region.float() - 2 * plan.float() + 0.1 * torch.randn(n, generator=generator)
    return TensorDataset(features, score.unsqueeze(1))


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(5, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        features, score = batch
        return torch.nn.functional.mse_loss(self.layer(features), score)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def train() -> None:
    """Fit two epochs on one-hot categorical features."""
    pl.seed_everything(0, verbose=False)
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
    trainer.fit(Model(), DataLoader(make_data(), batch_size=8, shuffle=True))


if __name__ == "__main__":
    train()
