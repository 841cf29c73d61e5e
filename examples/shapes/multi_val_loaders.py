"""Two validation dataloaders, told apart by ``dataloader_idx``.

Shape: ``val_dataloader`` returns a list of two loaders of different lengths;
``validation_step`` takes ``dataloader_idx`` and logs one metric per loader with
``sync_dist=True`` (Lightning suffixes the keys with ``/dataloader_idx_N``); validation
runs every epoch, including the sanity check before training.

Why it is correct: each validation loader gets its own ``DistributedSampler``, so every
rank runs the same number of batches of each; every rank logs the same keys, joining
every all-reduce.
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


def make_data(n: int, seed: int, shift: float = 0.0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator) + shift
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        x, y = batch
        name = "val_in" if dataloader_idx == 0 else "val_shifted"
        self.log(name, torch.nn.functional.mse_loss(self.layer(x), y), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def train() -> dict[str, float]:
    """Fit two epochs validating on an in-distribution and a shifted loader."""
    pl.seed_everything(0, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=2,
        num_sanity_val_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    validation = [
        DataLoader(make_data(16, 1), batch_size=4),
        DataLoader(make_data(8, 2, 2.0), batch_size=4),
    ]
    trainer.fit(Model(), DataLoader(make_data(32, 0), batch_size=4, shuffle=True), validation)
    return {k: float(v) for k, v in trainer.callback_metrics.items()}


if __name__ == "__main__":
    train()
