"""``EarlyStopping`` on a synced validation loss, with a patience that fires mid-run.

Shape: the ``EarlyStopping`` callback monitors ``val_loss`` (logged with ``sync_dist=True``)
and stops fit before ``max_epochs``; the data is pure noise, so validation stops
improving after a few epochs and training ends early.

Why it is correct: every rank sees the same reduced ``val_loss``; in addition the callback
itself reduces its decision across ranks (``trainer.strategy.reduce_boolean_decision``), so
every rank stops at the same epoch.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import EarlyStopping
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]
    from pytorch_lightning.callbacks import EarlyStopping  # type: ignore[assignment]


def noise(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    return TensorDataset(
        torch.randn(n, 4, generator=generator), torch.randn(n, 1, generator=generator)
    )


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

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.5)


def train() -> int:
    """Fit up to 20 epochs, stopped early by EarlyStopping; return the epochs run."""
    pl.seed_everything(0, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=20,
        callbacks=[EarlyStopping(monitor="val_loss", patience=1, mode="min")],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(
        Model(),
        DataLoader(noise(16, 0), batch_size=4, shuffle=True),
        DataLoader(noise(16, 1), batch_size=4),
    )
    return trainer.current_epoch


if __name__ == "__main__":
    train()
