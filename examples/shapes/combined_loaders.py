"""Two training dataloaders at once (a dict, Lightning's ``CombinedLoader``).

Shape: ``train_dataloader`` returns ``{"clean": loader_a, "noisy": loader_b}`` of different
lengths; Lightning combines them in ``max_size_cycle`` mode (the shorter one restarts
until the longer is done), shards each with its own ``DistributedSampler`` and hands the
step a dict of batches; the loss mixes both.

Why it is correct: each loader is sharded separately, so each rank sees a disjoint part
of each data set, and the same number of combined batches; the shorter loader's samples
repeat within a rank (by design of the cycle mode), never across ranks.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]


def make_data(n: int, seed: int, noise: float) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(
        x, x.sum(dim=1, keepdim=True) + noise * torch.randn(n, 1, generator=generator)
    )


class Data(pl.LightningDataModule):
    def train_dataloader(self) -> dict[str, DataLoader]:
        return {
            "clean": DataLoader(make_data(32, 0, 0.0), batch_size=4, shuffle=True),
            "noisy": DataLoader(make_data(16, 1, 1.0), batch_size=4, shuffle=True),
        }


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        losses = [torch.nn.functional.mse_loss(self.layer(x), y) for x, y in batch.values()]
        return losses[0] + 0.5 * losses[1]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def train() -> None:
    """Fit two epochs on two combined training loaders."""
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
    trainer.fit(Model(), datamodule=Data())


if __name__ == "__main__":
    train()
