"""A map-style ``Dataset`` returning dicts, label first, as many data libraries do.

Shape: ``__getitem__`` returns ``{"label": int, "features": tensor}``; the default collate
makes a batch dict ``{"label": LongTensor[B], "features": FloatTensor[B, 6]}``; the
classifier reads the keys by name.

Why it is correct: Lightning's ``DistributedSampler`` shards the indices: each rank gets
disjoint samples, equally many; the dict layout of a batch changes nothing in DDP.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]

CLASSES = 3


class Records(Dataset):
    def __init__(self, n: int = 48) -> None:
        generator = torch.Generator().manual_seed(0)
        self.features = torch.randn(n, 6, generator=generator)
        self.labels = self.features[:, :CLASSES].argmax(dim=1)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"label": int(self.labels[index]), "features": self.features[index]}


class Classifier(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(6, CLASSES)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.layer(batch["features"]), batch["label"])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def train() -> None:
    """Fit two epochs on dict batches."""
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
    trainer.fit(Classifier(), DataLoader(Records(), batch_size=8, shuffle=True))


if __name__ == "__main__":
    train()
