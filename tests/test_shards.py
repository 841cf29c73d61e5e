"""The data-sharding check judges sample identity, not equal content: a DistributedSampler
on every rank decides by its parts; elsewhere only content unique in each rank's stream,
seen again on another rank, counts, and only when it is most of a rank's samples."""

from __future__ import annotations

import json
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from chaoslight import Event
from chaoslight._checks._shards import row_hashes, sampler_facts
from chaoslight._runtime._evidence import OBSERVATION
from chaoslight.checks import DisjointShards, Evidence

CHECK = DisjointShards()


def event(rank: int, step: int, facts: dict[str, Any]) -> Event:
    return Event(OBSERVATION, CHECK.name, rank, step, 0.0, 0.0, detail=json.dumps(facts))


def epoch(rows: dict[int, list[list[int]]], samplers: dict[int, list[dict[str, Any]]]) -> Evidence:
    """One finished epoch: each rank's sampler facts, its batches' row fingerprints, its end."""
    events = []
    for rank, batches in rows.items():
        if rank in samplers:
            facts = {"fit": 0, "epoch": 0, "samplers": samplers[rank], "world_size": len(rows)}
            events.append(event(rank, 0, facts))
        for step, batch in enumerate(batches):
            events.append(event(rank, step, {"fit": 0, "epoch": 0, "rows": batch}))
        events.append(event(rank, len(batches), {"fit": 0, "epoch": 0, "end": 1}))
    return Evidence(events)


def distributed(rank: int, replicas: int = 2) -> list[dict[str, Any]]:
    return [{"kind": "distributed", "rank": rank, "replicas": replicas}]


OTHER = [{"kind": "other"}]
CATEGORICAL = [[1, 2, 3, 1], [2, 3, 1, 2]]  # six distinct rows in a whole data set


def test_a_distributed_sampler_per_rank_passes_whatever_the_content() -> None:
    """Identical content on both ranks is not a shared sample when each rank's
    DistributedSampler takes its own part."""
    evidence = epoch({0: CATEGORICAL, 1: CATEGORICAL}, {0: distributed(0), 1: distributed(1)})
    assert CHECK.judge(evidence) == []


def test_two_samplers_taking_the_same_part_are_named() -> None:
    """DistributedSampler(rank=0) on every rank: both ranks draw the same shard."""
    evidence = epoch({0: [[1, 2]], 1: [[3, 4]]}, {0: distributed(0), 1: distributed(0)})
    (violation,) = CHECK.judge(evidence)
    assert "rank 0: part 0 of 2, rank 1: part 0 of 2" in violation.message
    assert "fixed rank" in violation.cause


def test_duplicated_content_without_a_distributed_sampler_proves_nothing() -> None:
    """Categorical rows repeat within each rank's stream: no identity, no violation."""
    assert CHECK.judge(epoch({0: CATEGORICAL, 1: CATEGORICAL}, {0: OTHER, 1: OTHER})) == []


def test_a_few_duplicated_rows_split_across_ranks_pass() -> None:
    """Three rows duplicated in the data set and split between the ranks are not most of
    either rank's samples."""
    rank0 = [[1, 2, 3, 4], [5, 6, 7, 8]]
    rank1 = [[1, 2, 3, 10], [11, 12, 13, 14]]
    assert CHECK.judge(epoch({0: rank0, 1: rank1}, {})) == []


def test_every_rank_reading_everything_is_found_by_content() -> None:
    """Unique rows, all of them seen by both ranks: the unsharded stream."""
    stream = [[1, 2, 3, 4], [5, 6, 7, 8]]
    (violation,) = CHECK.judge(epoch({0: stream, 1: stream}, {0: OTHER, 1: OTHER}))
    assert "8 samples were seen by more than one rank" in violation.message


def test_uneven_batch_counts_are_reported_before_anything_else() -> None:
    """A rank that saw fewer batches in a finished epoch is the first violation."""
    evidence = epoch({0: [[1], [2]], 1: [[3]]}, {0: distributed(0), 1: distributed(1)})
    (violation,) = CHECK.judge(evidence)
    assert "rank 1 saw 1 batches, rank 0 saw 2" in violation.message


def test_every_row_aligned_tensor_goes_into_a_samples_fingerprint() -> None:
    """Two samples with one label but different features have different fingerprints;
    a dict batch with the label first is fingerprinted by its features too."""
    batch = {"label": torch.tensor([1, 1]), "features": torch.tensor([[0.5, 1.0], [2.0, 3.0]])}
    first, second = row_hashes(batch)
    assert first != second
    assert row_hashes([torch.ones(2, 3), torch.zeros(2)]) == row_hashes(
        (torch.ones(2, 3), torch.zeros(2))
    )


def test_sampler_facts_see_through_batch_samplers() -> None:
    """A DataLoader over a DistributedSampler reports its part; a plain one is 'other'."""
    data = TensorDataset(torch.arange(8.0))
    sampler = DistributedSampler(data, num_replicas=2, rank=1)
    assert sampler_facts(DataLoader(data, sampler=sampler, batch_size=2)) == {
        "kind": "distributed",
        "rank": 1,
        "replicas": 2,
    }
    assert sampler_facts(DataLoader(data, batch_size=2)) == {"kind": "other"}
