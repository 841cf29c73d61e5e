"""Data not sharded across ranks: a custom batch sampler that every rank runs in full.

Failure mode: variable-length samples are batched by length (a "bucketing" batch sampler,
the usual trick to cut padding). Lightning puts a ``DistributedSampler`` in front of a
plain ``sampler``, but a custom ``batch_sampler`` is the user's to shard, and the author
turned ``use_distributed_sampler`` off so Lightning would leave it alone. Every rank
then iterates over the whole dataset, in the same order: the job does the work of one
process ``world_size`` times over, each epoch trains on every sample ``world_size`` times
(the effective learning rate and epoch count are not what the config says), and the
replicas stay perfectly in sync, so nothing looks wrong. The same happens with no
``DistributedSampler`` at all, or an ``IterableDataset`` that ignores the rank
(``examples/corpus/iterable_shards.py``).

In production: training is no faster on 8 GPUs than on 1 (per epoch), and validation
numbers computed per rank agree suspiciously well.

What exposes it: no fault. The default check ``disjoint-shards`` hashes the rows of every
batch each rank trains on and reports the samples that more than one rank saw in an
epoch, in the fault-free baseline run.

    chaoslight fuzz examples/catalogue/unsharded_sampler.py:train_buggy

The fixed twin shards the buckets by rank (every ``world``-th batch from its rank, with
the same number of batches on every rank, so the ranks' gradient all-reduces pair up).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from _catalogue_common import FEATURES, Regressor, rank_and_world, seeded
from torch.utils.data import DataLoader, Dataset, Sampler

SAMPLES = 64
BATCH = 4


class Sequences(Dataset):
    """Samples of different "lengths" (a length per sample; x is a fixed-size summary)."""

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(SAMPLES, FEATURES, generator=generator)
        self.y = self.x.sum(dim=1, keepdim=True)
        self.lengths = torch.randint(5, 50, (SAMPLES,), generator=generator).tolist()

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index], self.y[index]


class BucketBatchSampler(Sampler[list[int]]):
    """Batches of samples of similar length, in a seeded order that changes every epoch."""

    def __init__(self, lengths: list[int], shard_by_rank: bool) -> None:
        self.lengths = lengths
        self.shard_by_rank = shard_by_rank
        self.epoch = 0

    def __iter__(self) -> Iterator[list[int]]:
        by_length = sorted(range(len(self.lengths)), key=lambda i: (self.lengths[i], i))
        batches = [by_length[i : i + BATCH] for i in range(0, len(by_length), BATCH)]
        order = torch.randperm(len(batches), generator=torch.Generator().manual_seed(self.epoch))
        self.epoch += 1
        batches = [batches[i] for i in order.tolist()]
        if self.shard_by_rank:
            rank, world = rank_and_world()
            usable = len(batches) - len(batches) % world  # equal batch counts on every rank
            batches = batches[rank:usable:world]
        return iter(batches)

    def __len__(self) -> int:
        batches = len(self.lengths) // BATCH
        if not self.shard_by_rank:
            return batches
        _, world = rank_and_world()
        return batches // world


def _run(shard_by_rank: bool) -> None:
    data = Sequences()
    sampler = BucketBatchSampler(data.lengths, shard_by_rank)
    fit = seeded(max_epochs=2, use_distributed_sampler=False)
    fit.fit(Regressor(), DataLoader(data, batch_sampler=sampler))


def train_buggy() -> None:
    """Bug: every rank iterates over every bucket (no sharding by rank)."""
    _run(shard_by_rank=False)


def train_fixed() -> None:
    """Fixed: each rank takes every ``world``-th bucket from its rank, equal counts."""
    _run(shard_by_rank=True)
