"""A dataset whose size does not divide into the ranks' batches.

Pattern: 33 samples, batch size 4, two ranks, ``drop_last=False``. Every rank must run
the same number of steps per epoch, because every step ends in collectives (the gradient
all-reduce, and here ``self.log(..., sync_dist=True)``'s all-reduce).

Correct (``train``): Lightning's default ``DistributedSampler``: it pads the (shuffled)
index list to a multiple of the world size by repeating its first index, so both ranks
get 17 samples, 5 batches (4+4+4+4+1) and 5 steps. One sample is seen twice per epoch:
the documented price of even shards (``DisjointShards`` allows ``world_size - 1``).

Bug (``train_buggy``): a hand-written sampler (with ``use_distributed_sampler=False``)
deals the indices round-robin without padding: rank 0 gets 17 samples (5 batches), rank 1
gets 16 (4 batches). Rank 0's fifth step has no partner: its collectives pair with rank
1's next-epoch ones, and at the end of training rank 0 waits for a rank that finished.
What a user sees: a hang (or a gloo size-mismatch abort) after the last epoch.

Revealed with no fault (schedule: empty).

Target: examples/corpus/uneven_batches.py:train (correct), :train_buggy (bug)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from _corpus_common import Regressor, dataset, pl, rank_and_world, trainer
from torch.utils.data import DataLoader, Sampler

SAMPLES = 33


class RoundRobin(Sampler[int]):
    """Rank r takes indices r, r + world, r + 2 * world, ...: unequal when n % world != 0."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Iterator[int]:
        rank, world = rank_and_world()
        return iter(range(rank, self.n, world))

    def __len__(self) -> int:
        rank, world = rank_and_world()
        return len(range(rank, self.n, world))


class Logged(Regressor):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.log("train_loss", loss, sync_dist=True)  # an all-reduce every step
        return loss


def _run(hand_sharded: bool) -> None:
    pl.seed_everything(0, verbose=False)
    data = dataset(SAMPLES)
    if hand_sharded:
        loader = DataLoader(data, batch_size=4, sampler=RoundRobin(SAMPLES))
        fit = trainer(max_epochs=2, use_distributed_sampler=False)
    else:
        loader = DataLoader(data, batch_size=4, drop_last=False)
        fit = trainer(max_epochs=2)
    fit.fit(Logged(), loader)


def train() -> None:
    """Correct: Lightning's DistributedSampler pads the shards to equal length."""
    _run(hand_sharded=False)


def train_buggy() -> None:
    """Bug: a hand-written sampler gives rank 0 one batch more than rank 1."""
    _run(hand_sharded=True)
