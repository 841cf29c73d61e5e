"""Train, save, then continue training in a second Trainer with ``fit(ckpt_path=...)``.

Shape: a first Trainer fits two epochs and saves ``stage1.ckpt`` with
``trainer.save_checkpoint``; a second Trainer (``max_epochs=4``) resumes from that file:
Lightning restores the weights, the Adam state, the epoch and the global step, then
trains two more epochs. Custom state travels through ``on_save_checkpoint`` /
``on_load_checkpoint``.

Why it is correct: every rank calls ``save_checkpoint`` (rank 0 writes, a barrier
follows), so the file is complete before any rank reads it in the second fit; every rank
restores the same state.
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
        self.samples_seen = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.samples_seen += x.shape[0]
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["samples_seen"] = self.samples_seen

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.samples_seen = checkpoint["samples_seen"]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=0.02)


def make_trainer(max_epochs: int) -> pl.Trainer:
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    return pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=max_epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )


def train() -> int:
    """Fit two epochs, save, resume in a new Trainer to four; return samples seen per rank."""
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=generator)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    first = make_trainer(max_epochs=2)
    first.fit(Model(), DataLoader(data, batch_size=4, shuffle=True))
    first.save_checkpoint("stage1.ckpt")

    second = make_trainer(max_epochs=4)
    model = Model()
    second.fit(model, DataLoader(data, batch_size=4, shuffle=True), ckpt_path="stage1.ckpt")
    assert second.current_epoch == 4
    return model.samples_seen


if __name__ == "__main__":
    train()
