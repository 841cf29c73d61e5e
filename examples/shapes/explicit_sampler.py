"""An explicit ``DistributedSampler`` with ``use_distributed_sampler=False``.

Shape: the program builds its own ``DistributedSampler`` (rank and world from the process
group, ``shuffle=True``, a seed, ``drop_last=True``) and tells Lightning not to replace it;
it calls ``sampler.set_epoch`` in ``on_train_epoch_start`` so each epoch shuffles
differently.

Why it is correct: ``DistributedSampler`` gives each rank a disjoint shard of equal length
(``drop_last=True`` trims to a multiple of the world size); every rank uses the same seed
and epoch, so the shards partition the same permutation.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

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
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def on_train_epoch_start(self) -> None:
        sampler = self.trainer.train_dataloader.sampler  # type: ignore[union-attr]
        if isinstance(sampler, DistributedSampler):
            sampler.set_epoch(self.current_epoch)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


class Data(pl.LightningDataModule):
    def setup(self, stage: str | None = None) -> None:
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(34, 4, generator=generator)
        self.data = TensorDataset(x, x.sum(dim=1, keepdim=True))

    def train_dataloader(self) -> DataLoader:
        if dist.is_available() and dist.is_initialized():
            sampler: Any = DistributedSampler(
                self.data,
                num_replicas=dist.get_world_size(),
                rank=dist.get_rank(),
                shuffle=True,
                seed=7,
                drop_last=True,
            )
        else:
            sampler = None
        return DataLoader(self.data, batch_size=4, sampler=sampler, shuffle=sampler is None)


def train() -> None:
    """Fit three epochs with a hand-built distributed sampler."""
    pl.seed_everything(0, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        use_distributed_sampler=False,
        max_epochs=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Model(), datamodule=Data())


if __name__ == "__main__":
    train()
