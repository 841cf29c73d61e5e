"""A torch ``BatchSampler`` handed to Lightning under DDP: a known framework issue
(Lightning#21122, open; Lightning#20326 on releases before 2.5.0).

Shape: the module's loader hooks build the loaders as torch documents for a batch sampler,
``DataLoader(data, batch_sampler=BatchSampler(sampler, batch_size=4, drop_last=False))``:
training over a ``WeightedRandomSampler`` (the rare class drawn as often as the common
one), validation over a ``RandomSampler`` (a random subset under ``limit_val_batches``).
Under DDP with ``use_distributed_sampler=True`` (the default) Lightning rebuilds each loader
around a ``DistributedSampler`` over the whole data set: it reads the sampler from
``loader.sampler`` (torch's ``SequentialSampler`` whenever a batch sampler is given), so

- the batch size is lost: the rebuilt loader has batches of **one** sample, four times as
  many optimizer steps per epoch on batches four times smaller;
- the weighted sampler is dropped: each rank draws a uniform shuffle, the weighting gone;
- on pytorch-lightning before 2.5.0 (Lightning#20326) the validation loader's random order
  is lost too: ``DistributedSampler(shuffle=False)``, the same samples every validation.

Nothing fails. ``chaoslight fuzz`` finds it with no fault (``data-order`` compares the
loader the program gave with the one Lightning made, for every stage) and reports it apart
as Lightning's known issue ``lightning-batch-sampler-rebuilt``::

    chaoslight fuzz examples/known_issues/batch_sampler_rebuilt.py:train
    chaoslight fuzz examples/known_issues/batch_sampler_rebuilt.py:train_fixed --strict

``train_fixed`` follows the workaround: ``use_distributed_sampler=False`` and each batch
sampler built over a rank-aware sampler (``DistributedSamplerWrapper`` around the weighted
sampler, a ``DistributedSampler(shuffle=True)`` for validation, whose epoch Lightning
sets before each run).
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    RandomSampler,
    Sampler,
    TensorDataset,
    WeightedRandomSampler,
)

try:
    import lightning.pytorch as pl
    from lightning.fabric.utilities.distributed import DistributedSamplerWrapper
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]
    from lightning_fabric.utilities.distributed import (  # type: ignore[no-redef]
        DistributedSamplerWrapper,
    )

BATCH = 4


def _data() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(48, 4, generator=generator)
    y = (torch.arange(48) % 6 == 0).long()  # one sample in six is of the rare class
    return TensorDataset(x, y)


class Classifier(pl.LightningModule):
    def __init__(self, rank_aware: bool) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)
        self.rank_aware = rank_aware

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.layer(x), y)
        self.log("val_loss", loss, sync_dist=True, batch_size=len(y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def train_dataloader(self) -> DataLoader:
        data = _data()
        labels = data.tensors[1]
        weights = torch.where(labels == 1, 5.0, 1.0)  # both classes drawn equally often
        sampler: Sampler[int] = WeightedRandomSampler(weights, num_samples=len(labels))
        if self.rank_aware and self.trainer.world_size > 1:
            sampler = DistributedSamplerWrapper(sampler, shuffle=False)
        return DataLoader(data, batch_sampler=BatchSampler(sampler, BATCH, drop_last=False))

    def val_dataloader(self) -> DataLoader:
        data = _data()
        sampler: Sampler[int] = RandomSampler(data)
        if self.rank_aware and self.trainer.world_size > 1:
            sampler = DistributedSampler(data, shuffle=True)
        return DataLoader(data, batch_sampler=BatchSampler(sampler, BATCH, drop_last=False))


def _fit(rank_aware: bool) -> None:
    pl.seed_everything(0, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=2,
        limit_val_batches=2,
        use_distributed_sampler=not rank_aware,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Classifier(rank_aware))


def train() -> None:
    """The batch samplers handed to Lightning as torch documents them."""
    _fit(rank_aware=False)


def train_fixed() -> None:
    """The workaround: each batch sampler over a rank-aware sampler, Lightning's off."""
    _fit(rank_aware=True)
