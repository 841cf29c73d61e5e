"""A real logger: ``CSVLogger`` writing into the working directory, plus
``LearningRateMonitor``.

Shape: ``logger=CSVLogger(save_dir="logs")`` (rank 0 writes the metrics file and the
hyperparameters), ``LearningRateMonitor(logging_interval="step")`` logs the rate, the
model calls ``save_hyperparameters`` and logs with ``sync_dist=True``; after fit the
program reads the CSV on rank 0 only.

Why it is correct: loggers write on rank 0 only (Lightning's ``rank_zero_experiment``);
the version directory is agreed across ranks by Lightning (a broadcast of rank 0's
choice); the CSV is read after fit's final barrier, by rank 0, which wrote it.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import LearningRateMonitor
    from lightning.pytorch.loggers import CSVLogger
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]
    from pytorch_lightning.callbacks import LearningRateMonitor  # type: ignore[assignment]
    from pytorch_lightning.loggers import CSVLogger  # type: ignore[assignment]


class Model(pl.LightningModule):
    def __init__(self, lr: float = 0.05, hidden: int = 8) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1)
        )

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, sync_dist=True)
        return loss

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams["lr"])
        return [optimizer], [torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)]


def train() -> int:
    """Fit two epochs logging to CSV; return the metric rows rank 0 wrote (0 elsewhere)."""
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=generator)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    logger = CSVLogger(save_dir="logs", name="shapes")
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=2,
        log_every_n_steps=2,
        logger=logger,
        callbacks=[LearningRateMonitor(logging_interval="step")],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Model(), DataLoader(data, batch_size=4, shuffle=True))
    if not trainer.is_global_zero:
        return 0
    with open(os.path.join(logger.log_dir, "metrics.csv")) as handle:
        return len(handle.readlines()) - 1


if __name__ == "__main__":
    train()
