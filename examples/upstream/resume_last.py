"""A preemptible job that resumes with ``ckpt_path="last"``, as Lightning's checkpointing
docs recommend ("resume training state", ``ModelCheckpoint(save_last=True)``).

Shape: one ``train()`` a scheduler may start again in the same directory:
``trainer.fit(model, datamodule=dm, ckpt_path="last")`` (on the first start there is no
checkpoint: Lightning warns and starts fresh); ``ModelCheckpoint(dirpath="checkpoints",
monitor="val_loss", save_top_k=2, save_last=True)``; a ``LightningDataModule`` built in
``setup``; ``Adam`` and a ``StepLR`` stepped per epoch; dropout; ``val_loss`` logged with
``sync_dist=True``; hyperparameters saved; ``max_epochs=4``.

Why it is correct: Lightning writes ``last.ckpt`` at every epoch end from rank 0 and every
rank waits at the barrier of ``save_checkpoint``, so a restart finds the whole last
epoch (or nothing); the checkpoint holds the weights, the optimizer, the scheduler and the
loop counters, and every rank resumes from the same file; the monitored value is synced,
so every rank keeps the same top 2.
"""

from __future__ import annotations

from typing import Any

import torch
from _upstream_common import pl, quiet_trainer
from torch.utils.data import DataLoader, TensorDataset

try:
    from lightning.pytorch.callbacks import ModelCheckpoint
except ImportError:  # the standalone package
    from pytorch_lightning.callbacks import ModelCheckpoint  # type: ignore[no-redef]


class SeriesDataModule(pl.LightningDataModule):
    """Windows of a noisy seasonal series: predict the next value from the last 8."""

    def __init__(self, batch_size: int = 8) -> None:
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage: str) -> None:
        generator = torch.Generator().manual_seed(21)
        t = torch.arange(120, dtype=torch.float32)
        series = torch.sin(t / 6) + 0.1 * torch.randn(120, generator=generator)
        windows = series.unfold(0, 9, 1)  # 112 windows of 8 inputs and 1 target
        x, y = windows[:, :8], windows[:, 8:]
        self.train_set = TensorDataset(x[:96], y[:96])
        self.val_set = TensorDataset(x[96:], y[96:])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size)


class Forecaster(pl.LightningModule):
    def __init__(self, lr: float = 0.01, dropout: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, 32),
            torch.nn.ReLU(),
            torch.nn.Dropout(dropout),
            torch.nn.Linear(32, 1),
        )

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y), sync_dist=True)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)]


def train() -> int:
    """Fit to four epochs, resuming from ``last.ckpt`` when a previous start left one."""
    pl.seed_everything(0, verbose=False)
    checkpoint = ModelCheckpoint(
        dirpath="checkpoints", monitor="val_loss", save_top_k=2, save_last=True
    )
    trainer = quiet_trainer(max_epochs=4, callbacks=[checkpoint])
    trainer.fit(Forecaster(), datamodule=SeriesDataModule(), ckpt_path="last")
    return trainer.global_step


if __name__ == "__main__":
    train()
