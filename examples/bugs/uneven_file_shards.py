"""An ``IterableDataset`` sharded by file across ranks: the files differ in length.

The bug: a streaming dataset reads a list of files (record shards) and gives each rank
every ``world``-th *file*. The files hold different numbers of records (the last shard of
a dataset export is short), so rank 0 streams 20 samples an epoch and rank 1 only 16:
rank 1 ends its epoch after 4 steps while rank 0 is still in step 5's gradient
all-reduce, and the ranks' collectives no longer pair up.

In production (NCCL): a hang at the end of the first epoch (the watchdog's timeout after
30 minutes), or, with ``find_unused_parameters`` or a validation loop in between, a
collective-mismatch error on one rank; which rank "fails" depends on the export, so the
bug moves when the data is re-exported.

The fix (``train_fixed``): shard by *record*, not by file: every rank walks the same
concatenated stream, keeps every ``world``-th record, and stops at the same count
(``total // world``), so every rank runs the same number of steps.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]

FILE_SIZES = (8, 8, 8, 8, 4)  # records per shard file; rank 0 gets 3 files, rank 1 gets 2


def _file(index: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The records of shard file ``index`` (generated, as if read from disk)."""
    generator = torch.Generator().manual_seed(index)
    x = torch.randn(FILE_SIZES[index], 4, generator=generator)
    y = x.sum(1, keepdim=True)
    return list(zip(x, y, strict=True))


class ShardStream(IterableDataset):
    """Stream the records of the shard files that belong to this rank."""

    def __init__(self, by_record: bool) -> None:
        self.by_record = by_record

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        rank = int(os.environ.get("RANK", "0"))
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if not self.by_record:  # the bug: whole files per rank, of different total lengths
            for index in range(rank, len(FILE_SIZES), world):
                yield from _file(index)
            return
        stream = itertools.chain.from_iterable(_file(i) for i in range(len(FILE_SIZES)))
        per_rank = sum(FILE_SIZES) // world
        yield from itertools.islice(stream, rank, rank + per_rank * world, world)


class Regressor(pl.LightningModule):
    """A one-layer regressor."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _run(by_record: bool) -> float:
    pl.seed_everything(0, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Regressor()
    trainer.fit(model, DataLoader(ShardStream(by_record), batch_size=4))
    return float(model.layer.weight.sum())


def train_buggy() -> float:
    """Bug: whole files per rank, so the ranks run different numbers of steps."""
    return _run(by_record=False)


def train_fixed() -> float:
    """Fixed: records dealt round-robin, the same count on every rank."""
    return _run(by_record=True)
