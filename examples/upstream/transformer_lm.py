"""A tiny transformer language model, adapted from Lightning's
``examples/pytorch/basics/transformer.py``.

Shape: Lightning's own demo ``Transformer`` (``lightning.pytorch.demos``: embedding,
positional encoding with dropout, ``nn.Transformer``, log-softmax) trained with
``nll_loss`` on next-token targets; a WikiText2-like data set of fixed-length blocks over
one long token stream (here a seeded Markov chain over 48 tokens, not a download);
``seed_everything(42)`` then an unseeded ``random_split`` into train/val/test, as
upstream; ``shuffle=True``; ``gradient_clip_val=0.25``, plain SGD; ``train_loss`` and
``val_loss`` logged with ``prog_bar=True``; ``trainer.test`` after ``fit``.

Why it is correct: ``random_split`` draws from the global generator right after
``seed_everything``, so every rank splits alike and Lightning's ``DistributedSampler``
shards the same train set; dropout draws differ between ranks but the gradients are
all-reduced, so the replicas stay equal; nothing is decided from a per-rank value.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from _upstream_common import pl, quiet_trainer
from torch.utils.data import DataLoader, Dataset, random_split

try:
    from lightning.pytorch.demos import Transformer
except ImportError:  # the standalone package
    from pytorch_lightning.demos import Transformer  # type: ignore[no-redef]

VOCAB = 48


class MarkovText(Dataset):
    """Blocks of ``block_size`` tokens and the same blocks shifted by one (WikiText2's form)."""

    def __init__(self, tokens: int = 1200, block_size: int = 12) -> None:
        generator = torch.Generator().manual_seed(3)
        jumps = torch.randint(1, 4, (tokens,), generator=generator)
        self.data = torch.cumsum(jumps, 0) % VOCAB
        self.block_size = block_size
        self.vocab_size = VOCAB

    def __len__(self) -> int:
        return len(self.data) // self.block_size - 1

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = index * self.block_size
        end = start + self.block_size
        return self.data[start:end], self.data[start + 1 : end + 1]


class LanguageModel(pl.LightningModule):
    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.model = Transformer(vocab_size=vocab_size, ninp=16, nhead=2, nhid=32, nlayers=1)

    def _loss(self, batch: Any) -> torch.Tensor:
        inputs, target = batch
        output = self.model(inputs, target)
        return F.nll_loss(output, target.view(-1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        self.log("val_loss", loss, prog_bar=True)
        return loss

    def test_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        self.log("test_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=2.0)


def train() -> None:
    """Fit for two epochs, then test."""
    pl.seed_everything(42, verbose=False)
    dataset = MarkovText()
    n = len(dataset)
    train_set, val_set, test_set = random_split(dataset, [n - 32, 16, 16])
    train_loader = DataLoader(train_set, batch_size=16, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=8, shuffle=False)
    test_loader = DataLoader(test_set, batch_size=8, shuffle=False)
    model = LanguageModel(vocab_size=dataset.vocab_size)
    trainer = quiet_trainer(gradient_clip_val=0.25, max_epochs=2, enable_checkpointing=False)
    trainer.fit(model, train_loader, val_loader)
    trainer.test(model, test_loader, verbose=False)


if __name__ == "__main__":
    train()
