"""Token embeddings, mean pooling and a linear classifier, with AdamW and weight decay.

Shape: integer token sequences (``LongTensor``) through ``nn.Embedding`` (with a padding
index), masked mean pooling, and cross-entropy over 4 classes; AdamW with weight decay;
the validation logs accuracy computed by hand with ``sync_dist=True``.

Why it is correct: the token data is seeded; the padding row of the embedding gets a zero
gradient on every rank; the embedding's dense gradients are all-reduced like any other.
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

VOCAB = 20
LENGTH = 6
CLASSES = 4
PAD = 0


def make_data(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(1, VOCAB, (n, LENGTH), generator=generator)
    lengths = torch.randint(2, LENGTH + 1, (n,), generator=generator)
    tokens[torch.arange(LENGTH)[None, :] >= lengths[:, None]] = PAD
    labels = tokens[:, 0] % CLASSES
    return TensorDataset(tokens, labels)


class TextClassifier(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(VOCAB, 8, padding_idx=PAD)
        self.classifier = torch.nn.Linear(8, CLASSES)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        mask = (tokens != PAD).unsqueeze(-1).float()
        pooled = (self.embedding(tokens) * mask).sum(dim=1) / mask.sum(dim=1)
        return self.classifier(pooled)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        tokens, labels = batch
        return torch.nn.functional.cross_entropy(self(tokens), labels)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        tokens, labels = batch
        accuracy = (self(tokens).argmax(dim=1) == labels).float().mean()
        self.log("val_acc", accuracy, sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=0.02, weight_decay=0.01)


def train() -> None:
    """Fit three epochs on synthetic token sequences."""
    pl.seed_everything(0, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(
        TextClassifier(),
        DataLoader(make_data(48, 0), batch_size=8, shuffle=True),
        DataLoader(make_data(16, 1), batch_size=8),
    )


if __name__ == "__main__":
    train()
