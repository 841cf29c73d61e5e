"""A rank-sharded ``IterableDataset`` of categorical records: duplicate content, no indices.

Shape: a stream of 64 events, each a one-hot (device type, country) pair and a latency;
only 8 distinct feature rows exist. Each rank keeps every ``world``-th event from its
rank, so the shards are disjoint by *position* in the stream, while equal feature rows
appear on both ranks (there are no indices to tell samples apart, only content).

Why it is correct: the stream is split between the ranks with no overlap and equal
lengths (64 is a multiple of ``world * batch_size``); nothing depends on the rank.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]

EVENTS = 64


class Events(IterableDataset):
    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
        generator = torch.Generator().manual_seed(0)
        device = torch.randint(0, 2, (EVENTS,), generator=generator)
        country = torch.randint(0, 4, (EVENTS,), generator=generator)
        latency = 10 * device.float() + country.float() + torch.rand(EVENTS, generator=generator)
        features = torch.cat(
            [torch.nn.functional.one_hot(device, 2), torch.nn.functional.one_hot(country, 4)], dim=1
        ).float()
        for index in range(rank, EVENTS, world):
            yield features[index], latency[index].reshape(1)


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(6, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        features, latency = batch
        return torch.nn.functional.mse_loss(self.layer(features), latency)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def train() -> None:
    """Fit two epochs on a rank-sharded stream of categorical events."""
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
    trainer.fit(Model(), DataLoader(Events(), batch_size=8))


if __name__ == "__main__":
    train()
