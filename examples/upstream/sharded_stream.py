"""An ``IterableDataset`` streaming pre-sharded files, as a WebDataset-style pipeline does
(Lightning's docs: an iterable data set gets no sampler, the program shards it itself).

Shape: ``prepare_data`` writes four shard files of 16 records once (atomically, like a
download); the ``IterableDataset`` opens the shards of its rank (``shards[rank::world]``),
shuffles each shard's records with a generator seeded by the epoch, and yields them;
the module calls the data set's ``set_epoch`` from ``on_train_epoch_start``, since
Lightning calls ``set_epoch`` on samplers only; ``ModelCheckpoint(save_last=True)`` at
every epoch end and ``fit(ckpt_path="last")``, so a restarted job resumes at the next
epoch; a map-style validation set.

Why it is correct: the shards partition the records, and every rank reads as many (two
shards of 16, 4 batches of 8), so every rank runs the same steps; the order depends only
on the epoch, which the checkpoint restores, so an interrupted and resumed job reads what
an uninterrupted one reads from that epoch on; Lightning's barrier after
``prepare_data`` lets every rank find every shard.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from _upstream_common import pl, quiet_trainer, save_atomically
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

try:
    from lightning.pytorch.callbacks import ModelCheckpoint
except ImportError:  # the standalone package
    from pytorch_lightning.callbacks import ModelCheckpoint  # type: ignore[no-redef]

SHARDS = [os.path.join("shards", f"part-{i:05d}.pt") for i in range(4)]
PER_SHARD = 16


def records(seed: int, n: int = PER_SHARD) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=generator)
    return x, (x @ torch.tensor([[1.0], [-2.0], [0.5]])) + 0.1


class ShardStream(IterableDataset):
    def __init__(self, paths: list[str]) -> None:
        self.paths = paths
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
        generator = torch.Generator().manual_seed(1000 + self.epoch)
        for path in self.paths[rank::world]:
            x, y = torch.load(path)
            for index in torch.randperm(len(x), generator=generator).tolist():
                yield x[index], y[index]


class StreamModule(pl.LightningModule):
    def __init__(self, stream: ShardStream) -> None:
        super().__init__()
        self.stream = stream
        self.layer = torch.nn.Linear(3, 1)

    def prepare_data(self) -> None:
        for i, path in enumerate(SHARDS):
            if not os.path.exists(path):
                save_atomically(records(seed=i), path)

    def on_train_epoch_start(self) -> None:
        self.stream.set_epoch(self.current_epoch)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y), sync_dist=True)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.stream, batch_size=8)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(*records(seed=99)), batch_size=8)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def train() -> int:
    """Three epochs over the streamed shards, resuming from ``last.ckpt`` if there is one."""
    pl.seed_everything(0, verbose=False)
    trainer = quiet_trainer(max_epochs=3, callbacks=[ModelCheckpoint(save_last=True)])
    trainer.fit(StreamModule(ShardStream(SHARDS)), ckpt_path="last")
    return trainer.global_step


if __name__ == "__main__":
    train()
