"""``ReduceLROnPlateau`` monitoring a validation metric logged with ``sync_dist=True``.

Shape: ``configure_optimizers`` returns a dict with ``"lr_scheduler": {"scheduler": ...,
"monitor": "val_loss"}``; Lightning steps the scheduler with the logged value after each
validation.

Why it is correct: ``val_loss`` is reduced across ranks (``sync_dist=True``), so every
rank's scheduler sees the same value and cuts the rate at the same epoch; the optimizers
stay identical.
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
    y = x.sum(dim=1, keepdim=True) + 0.5 * torch.randn(n, 1, generator=generator)
    return TensorDataset(x, y)


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y), sync_dist=True)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.2)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=0)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "monitor": "val_loss"},
        }


def train() -> float:
    """Fit four epochs with a plateau scheduler on the synced validation loss."""
    pl.seed_everything(0, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=4,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(
        Model(),
        DataLoader(make_data(32, 0), batch_size=4, shuffle=True),
        DataLoader(make_data(16, 1), batch_size=4),
    )
    return float(trainer.optimizers[0].param_groups[0]["lr"])


if __name__ == "__main__":
    train()
