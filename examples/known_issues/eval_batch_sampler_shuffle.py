"""A validation loader's batch sampler over a ``RandomSampler`` under DDP: a known
framework issue of pytorch-lightning before 2.5.0 (Lightning#20326).

Shape: the validation set is large and each validation looks at a random part of it
(``limit_val_batches=2``, a new part every epoch). Its loader is given a batch sampler of
the program's own, a ``BatchSampler`` subclass that reads each batch's samples in index
order (file order, for locality), over a ``RandomSampler``. Under DDP with
``use_distributed_sampler=True`` (the default) Lightning rebuilds the batch sampler around
a ``DistributedSampler`` whose shuffle it decides from ``loader.sampler``: torch's
``SequentialSampler`` whenever a batch sampler is given, so on 2.0-2.4.x the
``DistributedSampler`` has ``shuffle=False`` and every validation of every epoch looks at
the same 16 samples. Nothing fails; on 2.5.0 and later the shuffle is kept.

``chaoslight fuzz`` finds it with no fault (``data-order`` compares the loader the program
gave with the one Lightning made) and reports it apart as Lightning's known issue
``lightning-eval-batch-sampler-shuffle-lost`` on the releases that have it; on a fixed
release the run is clean::

    chaoslight fuzz examples/known_issues/eval_batch_sampler_shuffle.py:train
    chaoslight fuzz examples/known_issues/eval_batch_sampler_shuffle.py:train_fixed --strict

``train_fixed`` follows the workaround: ``use_distributed_sampler=False``, the batch sampler
over ``DistributedSampler(shuffle=True)`` (Lightning sets its epoch before each
validation) and the training loader's ``DistributedSampler`` given by the program too.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    RandomSampler,
    Sampler,
    TensorDataset,
)

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]

BATCH = 4


class InFileOrder(BatchSampler):
    """The sampler's batches, each read in index order (sequential reads on disk)."""

    def __iter__(self) -> Iterator[list[int]]:
        for batch in super().__iter__():
            yield sorted(batch)


def _data(seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 4, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


class Regressor(pl.LightningModule):
    def __init__(self, rank_aware: bool) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.rank_aware = rank_aware

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("val_loss", loss, sync_dist=True, batch_size=len(y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def _distributed(self) -> bool:
        return self.rank_aware and self.trainer.world_size > 1

    def train_dataloader(self) -> DataLoader:
        data = _data(0)
        if self._distributed():
            return DataLoader(data, batch_size=BATCH, sampler=DistributedSampler(data))
        return DataLoader(data, batch_size=BATCH, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        data = _data(1)
        sampler: Sampler[int] = RandomSampler(data)
        if self._distributed():
            sampler = DistributedSampler(data, shuffle=True)
        return DataLoader(data, batch_sampler=InFileOrder(sampler, BATCH, drop_last=False))


def _fit(rank_aware: bool) -> None:
    pl.seed_everything(0, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=2,
        limit_train_batches=4,
        limit_val_batches=2,
        use_distributed_sampler=not rank_aware,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Regressor(rank_aware))


def train() -> None:
    """The validation batch sampler over a RandomSampler, handed to Lightning as it is."""
    _fit(rank_aware=False)


def train_fixed() -> None:
    """The workaround: every loader's sampler rank-aware, Lightning's replacement off."""
    _fit(rank_aware=True)
