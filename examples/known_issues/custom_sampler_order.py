"""A curriculum sampler under DDP: a known framework issue (Lightning#21131, #21447, open).

Shape: the training DataLoader is given a sampler of the program's own that yields the
samples easiest first (a curriculum: here, by the size of the target), every epoch in the
same order. Under DDP with ``use_distributed_sampler=True`` (the default), Lightning wraps
it in ``DistributedSamplerWrapper(sampler, shuffle=True)``: the wrapper lists the
sampler's order and draws *positions in that list* in a shuffled order, so each rank trains
on a random shuffle of the curriculum, not on its share of it. Nothing fails; the
curriculum is silently gone.

``chaoslight fuzz`` finds it with no fault at all (``data-order``: the program's sampler
gives the same order in epochs 0 and 1, and each rank draws another) and reports it apart
as Lightning's known issue ``lightning-custom-sampler-shuffled``::

    chaoslight fuzz examples/known_issues/custom_sampler_order.py:train
    chaoslight fuzz examples/known_issues/custom_sampler_order.py:train_fixed --strict

``train_fixed`` follows the workaround: ``use_distributed_sampler=False`` and the
curriculum made rank-aware by the program itself
(``DistributedSamplerWrapper(sampler, shuffle=False)``: each rank takes every
world-size-th position of the curriculum, in order).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Sampler, TensorDataset

try:
    import lightning.pytorch as pl
    from lightning.fabric.utilities.distributed import DistributedSamplerWrapper
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]
    from lightning_fabric.utilities.distributed import (  # type: ignore[no-redef]
        DistributedSamplerWrapper,
    )


class Curriculum(Sampler[int]):
    """Every sample once per epoch, easiest (smallest target) first."""

    def __init__(self, difficulty: torch.Tensor) -> None:
        self.order = [int(i) for i in torch.argsort(difficulty)]

    def __iter__(self) -> Iterator[int]:
        return iter(self.order)

    def __len__(self) -> int:
        return len(self.order)


class Regressor(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _fit(rank_aware: bool) -> None:
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(48, 4, generator=generator)
    y = x.sum(dim=1, keepdim=True)
    data = TensorDataset(x, y)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    sampler: Sampler[int] = Curriculum(y.abs().squeeze(1))
    if rank_aware and devices > 1:
        sampler = DistributedSamplerWrapper(sampler, shuffle=False)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=2,
        use_distributed_sampler=not rank_aware,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Regressor(), DataLoader(data, batch_size=4, sampler=sampler))


def train() -> None:
    """The curriculum handed to Lightning as it is: shuffled by Lightning's wrapper."""
    _fit(rank_aware=False)


def train_fixed() -> None:
    """The workaround: the program makes its curriculum rank-aware, unshuffled."""
    _fit(rank_aware=True)
