"""A batch sampler that reshuffles in ``set_epoch``, which Lightning never calls on it.

The bug: the program shuffles the *order of whole batches* (as length-bucketing code
does: batches of similar samples stay together, their order changes each epoch) in a
``BatchSampler`` subclass with a ``set_epoch`` method, written like ``DistributedSampler``
(seeded by ``seed + epoch``, so every rank agrees). It relies on Lightning to call
``set_epoch``, but Lightning (``_set_sampler_epoch``, lightning 2.x) calls it only on
``loader.sampler`` and ``loader.batch_sampler.sampler``, never on the batch sampler
itself. The batch sampler stays at epoch 0: every epoch trains on the same batches in the
same order, on every rank.

In production: nothing fails and ``disjoint-shards`` passes (the shards are disjoint:
the *order* is wrong). The model sees the same sequence every epoch, which hurts
generalisation and makes curriculum or order effects repeat; losses look smoother than
they should.

The fix (``train_fixed``): call ``set_epoch`` on the batch sampler yourself, in
``on_train_epoch_start`` (or derive the epoch from the inner ``DistributedSampler``,
whose ``set_epoch`` Lightning does call).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, Sampler, SequentialSampler, TensorDataset
from torch.utils.data.distributed import DistributedSampler

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]


class ShuffledBatches(BatchSampler):
    """Batches of consecutive indices, their order reshuffled each epoch by ``set_epoch``."""

    def __init__(
        self, sampler: Sampler[int], batch_size: int, drop_last: bool = False, seed: int = 0
    ) -> None:
        super().__init__(sampler, batch_size, drop_last)
        self.shuffle = True
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[int]]:
        batches = list(super().__iter__())
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        for position in torch.randperm(len(batches), generator=generator).tolist():
            yield batches[position]


class Regressor(pl.LightningModule):
    """A linear regressor on its own loader; ``tells_epoch``: set the batch sampler's epoch."""

    def __init__(self, tells_epoch: bool) -> None:
        super().__init__()
        self.tells_epoch = tells_epoch
        self.layer = torch.nn.Linear(4, 1)
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(96, 4, generator=generator)
        self.data = TensorDataset(x, x.sum(1, keepdim=True))

    def train_dataloader(self) -> DataLoader:
        trainer = self.trainer
        sampler: Sampler[int] = (
            DistributedSampler(
                self.data, num_replicas=trainer.world_size, rank=trainer.global_rank, shuffle=False
            )
            if trainer.world_size > 1
            else SequentialSampler(self.data)
        )
        return DataLoader(self.data, batch_sampler=ShuffledBatches(sampler, batch_size=4))

    def on_train_epoch_start(self) -> None:
        if self.tells_epoch:  # the fix: Lightning does not do this for a batch sampler
            self.trainer.train_dataloader.batch_sampler.set_epoch(self.current_epoch)  # type: ignore[union-attr]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _run(tells_epoch: bool) -> None:
    pl.seed_everything(0, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=2,
        use_distributed_sampler=False,  # the program shards with its own DistributedSampler
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Regressor(tells_epoch))


def train_buggy() -> None:
    """Bug: the batch sampler's set_epoch is never called; every epoch has the same order."""
    _run(tells_epoch=False)


def train_fixed() -> None:
    """Fixed: the module tells the batch sampler the epoch at each epoch start."""
    _run(tells_epoch=True)
