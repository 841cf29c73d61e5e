"""An epoch-wise ``StepLR`` scheduler returned from ``configure_optimizers``.

Shape: ``configure_optimizers`` returns ``([optimizer], [scheduler])``; Lightning steps the
scheduler at each epoch end. Adam, so the optimizer carries per-parameter state.

Why it is correct: the scheduler depends only on the epoch count, which every rank shares;
the optimizer state evolves from identical gradients on every rank.
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


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("lr", self.optimizers().param_groups[0]["lr"])  # type: ignore[union-attr]
        return loss

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=0.05)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        return [optimizer], [scheduler]


def train() -> float:
    """Fit three epochs halving the learning rate each epoch; return the final rate."""
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=generator)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Model()
    trainer.fit(model, DataLoader(data, batch_size=4, shuffle=True))
    return float(trainer.optimizers[0].param_groups[0]["lr"])


if __name__ == "__main__":
    train()
