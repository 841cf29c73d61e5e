"""An ``IterableDataset`` that shards by rank and by DataLoader worker.

Shape: a streaming dataset generated on the fly; ``__iter__`` reads the rank from
``torch.distributed`` and the worker from ``get_worker_info()``, and keeps the samples
``index % (world * workers) == rank * workers + worker``; the loader uses two worker
processes. Lightning adds no sampler to an iterable dataset.

Why it is correct: the shards partition the stream; the stream length (64) is a multiple
of ``world * workers * batch_size``, so every rank yields the same number of full batches
(each worker yields whole batches: 16 samples per worker = 4 batches of 4).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]

SAMPLES = 64


class Stream(IterableDataset):
    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        shards, shard = world * workers, rank * workers + worker
        for index in range(shard, SAMPLES, shards):
            generator = torch.Generator().manual_seed(index)
            x = torch.randn(4, generator=generator)
            yield x, x.sum().reshape(1)


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def train() -> None:
    """Fit two epochs on a rank- and worker-sharded stream."""
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
    trainer.fit(Model(), DataLoader(Stream(), batch_size=4, num_workers=2))


if __name__ == "__main__":
    train()
