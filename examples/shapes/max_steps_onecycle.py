"""``max_steps`` instead of epochs, with a per-step ``OneCycleLR`` scheduler.

Shape: ``max_steps=10`` over an epoch of 6 steps (fit stops in the second epoch);
``configure_optimizers`` returns a dict whose ``lr_scheduler`` has ``interval="step"``,
so Lightning steps the scheduler after every optimizer step.

Why it is correct: the step count is global and the same on every rank; the scheduler
depends only on it; the loaders have equal length on every rank.
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

MAX_STEPS = 10


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=0.1, total_steps=MAX_STEPS
        )
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }


def train() -> int:
    """Fit for MAX_STEPS optimizer steps; return the global step reached."""
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(48, 4, generator=generator)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_steps=MAX_STEPS,
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Model(), DataLoader(data, batch_size=4, shuffle=True))
    assert trainer.global_step == MAX_STEPS
    return trainer.global_step


if __name__ == "__main__":
    train()
