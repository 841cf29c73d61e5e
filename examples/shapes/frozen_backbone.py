"""A frozen pretrained backbone and a trainable head (transfer learning).

Shape: a "pretrained" backbone (its weights set from a fixed seed) with
``requires_grad_(False)`` and kept in eval mode in ``on_train_epoch_start``; only the head
is trained, and only the head's parameters go to the optimizer. DDP registers only the
parameters that require a gradient.

Why it is correct: the frozen parameters never change on any rank; the head's gradients
are all-reduced; the backbone's batch norm runs in eval mode on every rank, so its
running statistics stay the pretrained ones everywhere.
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


def pretrained_backbone() -> torch.nn.Module:
    torch.manual_seed(123)
    return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU())


class TransferModel(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = pretrained_backbone()
        self.backbone.requires_grad_(False)
        self.head = torch.nn.Linear(16, 1)

    def on_train_epoch_start(self) -> None:
        self.backbone.eval()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.head(self.backbone(x)), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.head.parameters(), lr=0.05)


def train() -> None:
    """Fit the head for two epochs on top of the frozen backbone."""
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=generator)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    model = TransferModel()
    pl.seed_everything(0, verbose=False)
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
    trainer.fit(model, DataLoader(data, batch_size=4, shuffle=True))
    assert all(not p.requires_grad for p in model.backbone.parameters())


if __name__ == "__main__":
    train()
