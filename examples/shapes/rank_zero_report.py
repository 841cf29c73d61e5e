"""Rank-zero-only reporting: ``@rank_zero_only`` helpers and ``rank_zero_info``.

Shape: a ``@rank_zero_only`` method prints a summary and writes a small text report into
the working directory at each epoch end; ``rank_zero_info`` logs a line. Nothing the
decorated code does involves a collective or changes state other ranks read.

Why it is correct: the rank-zero-only code is side output only (stdout and a report file
that no rank reads back); every collective (the gradient all-reduce, the synced log) is
made by every rank outside the decorated code.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
    from lightning.pytorch.utilities import rank_zero_info, rank_zero_only
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]
    from pytorch_lightning.utilities import rank_zero_info, rank_zero_only


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.epoch_losses: list[torch.Tensor] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.epoch_losses.append(loss.detach())
        return loss

    def on_train_epoch_end(self) -> None:
        mean = torch.stack(self.epoch_losses).mean()
        self.epoch_losses.clear()
        self.log("epoch_loss", mean, sync_dist=True)
        self.report(float(mean))

    @rank_zero_only
    def report(self, loss: float) -> None:
        print(f"epoch {self.current_epoch}: local loss {loss:.4f}")
        with open("report.txt", "a") as handle:
            handle.write(f"{self.current_epoch} {loss:.6f}\n")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def train() -> None:
    """Fit three epochs reporting from rank 0 only."""
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
    rank_zero_info("starting training")
    trainer.fit(Model(), DataLoader(data, batch_size=4, shuffle=True))


if __name__ == "__main__":
    train()
