"""``limit_train_batches`` / ``limit_val_batches`` with a fractional ``val_check_interval``.

Shape: 12 batches per rank per epoch, limited to 8 (``limit_train_batches=8``);
validation twice per epoch (``val_check_interval=0.5``) on two batches
(``limit_val_batches=2``), logging a synced metric.

Why it is correct: the limits are counts, the same on every rank, so every rank trains
the same steps and validates at the same ones; every rank logs at each validation.
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


def make_data(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.validations = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y), sync_dist=True)

    def on_validation_epoch_end(self) -> None:
        self.validations += 1

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def train() -> int:
    """Fit two limited epochs validating twice each; return the validations run."""
    pl.seed_everything(0, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=2,
        limit_train_batches=8,
        limit_val_batches=2,
        val_check_interval=0.5,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Model()
    trainer.fit(
        model,
        DataLoader(make_data(12 * 2 * devices, 0), batch_size=2, shuffle=True),
        DataLoader(make_data(32, 1), batch_size=4),
    )
    return model.validations


if __name__ == "__main__":
    train()
