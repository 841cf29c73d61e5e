"""``trainer.validate`` before ``fit``, ``deterministic=True`` and reloaded dataloaders.

Shape: the program first runs ``trainer.validate`` (a baseline score), then ``fit`` with
``reload_dataloaders_every_n_epochs=1`` (the datamodule's ``train_dataloader`` is called
again each epoch and draws a fresh, epoch-seeded subset), ``check_val_every_n_epoch=2``
and ``deterministic=True``.

Why it is correct: the reloaded subset depends only on the epoch number, the same on
every rank; Lightning wraps each new loader in a ``DistributedSampler``, so each rank
gets an equal shard of the same subset; validation logs with ``sync_dist=True``.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, Subset, TensorDataset

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]


class Data(pl.LightningDataModule):
    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(64, 4, generator=generator)
        self.data = TensorDataset(x, x.sum(dim=1, keepdim=True))
        self.reloads = 0

    def train_dataloader(self) -> DataLoader:
        epoch = self.trainer.current_epoch if self.trainer is not None else 0
        self.reloads += 1
        order = torch.randperm(len(self.data), generator=torch.Generator().manual_seed(100 + epoch))
        return DataLoader(Subset(self.data, order[:24].tolist()), batch_size=4, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(Subset(self.data, list(range(48, 64))), batch_size=4)


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
        return torch.optim.SGD(self.parameters(), lr=0.05)


def train() -> float:
    """Validate, then fit four epochs on a fresh subset each; return the final val loss."""
    pl.seed_everything(0, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=4,
        check_val_every_n_epoch=2,
        reload_dataloaders_every_n_epochs=1,
        deterministic=True,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model, data = Model(), Data()
    trainer.validate(model, datamodule=data, verbose=False)
    trainer.fit(model, datamodule=data)
    return float(trainer.callback_metrics["val_loss"])


if __name__ == "__main__":
    train()
