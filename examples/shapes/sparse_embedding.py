"""A sparse-gradient embedding (``nn.Embedding(sparse=True)``) trained with ``SparseAdam``.

Shape: a bag-of-words regressor over a 50-token vocabulary whose embedding produces sparse
gradients; DDP all-reduces them as sparse tensors (gloo supports sparse all-reduce);
``SparseAdam`` updates the embedding, a dense ``Adam`` the output layer (two optimizers
under automatic optimization are not allowed, so the program uses manual optimization).

Why it is correct: every rank runs one backward and both optimizer steps per batch; DDP
hands every rank the same reduced (sparse) gradient, so the replicas stay identical.
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

VOCAB = 50
LENGTH = 5


def make_data(n: int = 48) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, VOCAB, (n, LENGTH), generator=generator)
    weights = torch.randn(VOCAB, generator=generator)
    return TensorDataset(tokens, weights[tokens].sum(dim=1, keepdim=True))


class BagOfWords(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.embedding = torch.nn.Embedding(VOCAB, 8, sparse=True)
        self.out = torch.nn.Linear(8, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        tokens, target = batch
        sparse_opt, dense_opt = self.optimizers()  # type: ignore[attr-defined]
        loss = torch.nn.functional.mse_loss(self.out(self.embedding(tokens).mean(dim=1)), target)
        sparse_opt.zero_grad()
        dense_opt.zero_grad()
        self.manual_backward(loss)
        sparse_opt.step()
        dense_opt.step()
        return loss.detach()

    def configure_optimizers(self) -> Any:
        return (
            torch.optim.SparseAdam(list(self.embedding.parameters()), lr=0.05),
            torch.optim.Adam(self.out.parameters(), lr=0.05),
        )


def train() -> None:
    """Fit two epochs with a sparse embedding."""
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
    trainer.fit(BagOfWords(), DataLoader(make_data(), batch_size=8, shuffle=True))


if __name__ == "__main__":
    train()
