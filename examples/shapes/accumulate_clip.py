"""Gradient accumulation with gradient clipping by norm.

Shape: ``accumulate_grad_batches=3`` (DDP skips the gradient all-reduce on the first two
micro-batches of each group, ``no_sync``) and ``gradient_clip_val=0.5`` (clipping by the
norm of the already all-reduced gradient); 10 batches per rank per epoch, so the last
group of each epoch is short.

Why it is correct: every rank has the same number of batches (the sampler pads), so the
ranks open and close accumulation groups together; the clip norm is computed from the
synchronised gradient, so every rank scales it identically.
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
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)
        )

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def train() -> None:
    """Fit two epochs accumulating 3 batches per step and clipping the gradient norm."""
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(40, 4, generator=generator)
    data = TensorDataset(x, 3 * x.sum(dim=1, keepdim=True))
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=2,
        accumulate_grad_batches=3,
        gradient_clip_val=0.5,
        gradient_clip_algorithm="norm",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Model(), DataLoader(data, batch_size=2, shuffle=True))


if __name__ == "__main__":
    train()
