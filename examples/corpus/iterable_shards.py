"""An ``IterableDataset`` that shards its stream by rank.

Pattern: a streaming dataset (no ``__len__``, no sampler). Lightning cannot put a
``DistributedSampler`` in front of an iterable, so the dataset itself must hand each rank
its own part of the stream, and every rank the same number of batches.

Correct (``train``): each rank reads its rank and the world size from the process group
and keeps every ``world``-th sample starting at its rank; the stream's length is a
multiple of ``world * batch_size``, so each rank gets exactly as many batches. Every
sample is seen by one rank per epoch; the ranks' gradient all-reduces pair up step by
step.

Bug (``train_buggy``): the dataset ignores the rank, as a single-process loader does.
Every rank streams the whole dataset: each sample is trained on ``world`` times per epoch
and the "data-parallel" job does the work of one process ``world`` times over. Nothing
crashes and the replicas stay equal (they all see the same batches), so only a check on
the data notices.

Revealed with no fault: ``DisjointShards`` reports the samples seen by more than one
rank (schedule: empty).

Target: examples/corpus/iterable_shards.py:train (correct), :train_buggy (bug)
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from _corpus_common import FEATURES, Regressor, pl, rank_and_world, trainer
from torch.utils.data import DataLoader, IterableDataset

SAMPLES = 48  # a multiple of world_size * batch size for 1, 2, 3 and 4 ranks
BATCH = 4


class Stream(IterableDataset):
    """``SAMPLES`` samples, each made from its own index, so the stream is reproducible."""

    def __init__(self, shard_by_rank: bool) -> None:
        self.shard_by_rank = shard_by_rank

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        rank, world = rank_and_world() if self.shard_by_rank else (0, 1)
        for index in range(rank, SAMPLES, world):
            generator = torch.Generator().manual_seed(1000 + index)
            x = torch.randn(FEATURES, generator=generator)
            yield x, x.sum().reshape(1)


def _run(shard_by_rank: bool) -> None:
    pl.seed_everything(0, verbose=False)
    loader = DataLoader(Stream(shard_by_rank), batch_size=BATCH)
    trainer(max_epochs=2).fit(Regressor(), loader)


def train() -> None:
    """Correct: each rank streams its own shard, all shards the same length."""
    _run(shard_by_rank=True)


def train_buggy() -> None:
    """Bug: every rank streams the whole dataset."""
    _run(shard_by_rank=False)
