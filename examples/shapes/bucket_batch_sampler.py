"""A length-bucketing ``BatchSampler`` over an explicit ``DistributedSampler``.

Shape: variable-length token sequences; a custom ``BatchSampler`` (it needs the lengths,
so Lightning cannot re-create it with its own sampler: ``use_distributed_sampler=False``)
groups the indices of a ``DistributedSampler`` into batches of similar length (sorted
within chunks of 4 batches), and a ``collate_fn`` pads each batch to its longest
sequence; ``set_epoch`` reshuffles each epoch.

Why it is correct: the ``DistributedSampler`` gives each rank disjoint indices, equally
many; bucketing only reorders a rank's own indices into batches, and every rank makes the
same number of batches (48 / 2 ranks / 4 per batch = 6).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import BatchSampler, DataLoader, Dataset, DistributedSampler, Sampler

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]

VOCAB = 30


class Sequences(Dataset):
    def __init__(self, n: int = 48) -> None:
        generator = torch.Generator().manual_seed(0)
        lengths = torch.randint(2, 9, (n,), generator=generator).tolist()
        self.items = [torch.randint(1, VOCAB, (k,), generator=generator) for k in lengths]
        self.targets = [float(item.float().mean()) for item in self.items]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, float]:
        return self.items[index], self.targets[index]


class BucketBatchSampler(BatchSampler):
    def __init__(
        self, sampler: Sampler[int], batch_size: int, drop_last: bool, lengths: Sequence[int]
    ) -> None:
        super().__init__(sampler, batch_size, drop_last)
        self.lengths = lengths

    def __iter__(self) -> Iterator[list[int]]:
        indices = list(self.sampler)
        chunk = self.batch_size * 4
        for start in range(0, len(indices), chunk):
            ordered = sorted(indices[start : start + chunk], key=lambda i: self.lengths[i])
            for first in range(0, len(ordered), self.batch_size):
                batch = ordered[first : first + self.batch_size]
                if len(batch) == self.batch_size or not self.drop_last:
                    yield batch


def pad(batch: list[tuple[torch.Tensor, float]]) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.nn.utils.rnn.pad_sequence([item for item, _ in batch], batch_first=True)
    return tokens, torch.tensor([[target] for _, target in batch])


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(VOCAB, 8, padding_idx=0)
        self.out = torch.nn.Linear(8, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        tokens, target = batch
        mask = (tokens != 0).unsqueeze(-1).float()
        pooled = (self.embedding(tokens) * mask).sum(dim=1) / mask.sum(dim=1)
        return torch.nn.functional.mse_loss(self.out(pooled), target)

    def on_train_epoch_start(self) -> None:
        sampler = self.trainer.train_dataloader.batch_sampler.sampler  # type: ignore[union-attr]
        if isinstance(sampler, DistributedSampler):
            sampler.set_epoch(self.current_epoch)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=0.02)


def train() -> None:
    """Fit two epochs on length-bucketed, padded batches."""
    pl.seed_everything(0, verbose=False)
    data = Sequences()
    lengths = [len(item) for item in data.items]
    sampler: Sampler[int] = (
        DistributedSampler(data, shuffle=True, seed=0)
        if dist.is_available() and dist.is_initialized()
        else torch.utils.data.RandomSampler(data)
    )
    batches = BucketBatchSampler(sampler, batch_size=4, drop_last=False, lengths=lengths)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=2,
        use_distributed_sampler=False,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Model(), DataLoader(data, batch_sampler=batches, collate_fn=pad))


if __name__ == "__main__":
    train()
