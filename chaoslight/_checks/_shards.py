"""The data-sharding check: in each epoch of each fit, no two ranks see the same sample,
and every rank that finished the epoch saw as many batches.

A sample is known by its index where the data has one: a train loader drawing through a
``DistributedSampler`` (Lightning's own, or one built by hand) shards by construction
exactly when every rank's sampler takes a different part of ``world_size``. Elsewhere (an
``IterableDataset``, a sampler of the program's own) a sample is known only by its
content, and equal content is not the same sample (categorical data, duplicated rows):
content is evidence only where it is unique in each rank's stream, and only when most of
a rank's samples turn up on another rank, as they do when every rank reads everything.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from chaoslight._checks._base import Check, Evidence, Violation, observe, observer_class
from chaoslight._checks._invariants import quietly
from chaoslight._runtime._events import parse_fired

Epoch = tuple[int, int]  # (fit, epoch): the fits of one process count from 0


def data_altered(evidence: Evidence) -> list[str]:
    """The faults that fired in the run and changed which samples a rank read (a batch
    read twice, or lost: a kind's ``alters_data``), as text: what a rank's stream holds
    is then the fault's doing, and the data checks do not judge it by content or count."""
    return [fired.text for fired in parse_fired(evidence.events) if fired.fault.alters_data]


def row_hashes(batch: Any, cache: dict[Any, Any] | None = None) -> list[int]:
    """A 64-bit fingerprint of each sample (row) of the batch: every tensor in it whose
    first dimension is the batch's (features, labels, masks) goes into each row's.

    One vectorised multiply-and-sum over each tensor's rows' bytes (integer overflow
    wraps), so a batch of 64 samples costs a few small kernels, not 64 calls into a hash
    library. The multipliers are kept in ``cache`` when given (the observer's, emptied
    after each fit).
    """
    import torch

    tensors = row_tensors(batch)
    if not tensors:
        return []
    with torch.no_grad(), quietly():
        combined = None
        for tensor in tensors:
            part = _tensor_rows(tensor, cache)
            combined = part if combined is None else combined * _MIX + part
        values: list[int] = combined.tolist() if combined is not None else []
    return values


_MIX = 0x100000001B3  # an odd 64-bit multiplier: the order of the tensors counts


def _tensor_rows(tensor: Any, cache: dict[Any, Any] | None) -> Any:
    """One fingerprint per row of ``tensor`` (an int64 tensor)."""
    import torch

    rows = tensor.detach().reshape(tensor.shape[0], -1)
    if rows.dtype == torch.bool:
        rows = rows.to(torch.uint8)
    if not rows.is_contiguous() or rows.storage_offset() * rows.element_size() % 8:
        rows = rows.clone(memory_format=torch.contiguous_format)  # aligned, as a copy
    # The widest integer view the row's bytes allow: fewer elements to multiply.
    wide = rows.shape[1] * rows.element_size() % 8 == 0
    data = rows.view(torch.int64) if wide else rows.view(torch.uint8).to(torch.int64)
    return (data * multipliers(data.shape[1], data.device, cache)).sum(dim=1)


def row_tensors(batch: Any) -> list[Any]:
    """The batch's tensors whose first dimension is the first tensor's: one row a sample."""
    tensors = [t for t in _tensors(batch) if t.dim() > 0 and not t.is_sparse]
    if not tensors or tensors[0].shape[0] == 0:
        return []
    rows = tensors[0].shape[0]
    return [t for t in tensors if t.shape[0] == rows and not t.is_complex()]


def _tensors(batch: Any) -> list[Any]:
    import torch

    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        return [tensor for item in batch for tensor in _tensors(item)]
    return []


class DisjointShards(Check):
    """In each epoch, no two ranks see the same sample and every rank sees as many batches.

    A train loader drawing through a ``DistributedSampler`` on every rank is judged by its
    samplers: they must take different parts of ``world_size`` (its padding of the last
    round is DistributedSampler's own, and allowed). Other data is judged by content:
    a violation needs more than ``world_size - 1`` samples each seen once on a rank and
    again on another, making at least half of a rank's samples: duplicated content in the
    data proves nothing, and false alarms are worse than misses. Epochs are told apart by
    fit too (two fits in one process each have an epoch 0), and batch counts are compared
    only over epochs every rank finished: a run a fault or a hang cut short leaves its
    last epoch unequal, and that is not a sharding bug. In a run where a fault repeated or
    lost a batch (``repeat_batch``, ``drop_batch``) only the samplers are judged: the
    stream's content and count are the fault's.
    """

    name = "disjoint-shards"
    cause = "no DistributedSampler, or an IterableDataset that does not shard by rank"
    sampler_cause = (
        "a DistributedSampler built with a fixed rank or num_replicas: give it the "
        "trainer's (or let Lightning build it: use_distributed_sampler=True)"
    )

    def observer(self) -> Any:
        check = self
        cache: dict[Any, Any] = {}  # this fit's hash multipliers
        fits = [-1]
        # This epoch's loaders all draw through a DistributedSampler: the samplers decide,
        # so the batches are counted, not hashed (hashing is the check's cost per batch).
        by_sampler = [False]

        def on_fit_start(self: Any, trainer: Any, module: Any) -> None:
            fits[0] += 1

        def on_train_epoch_start(self: Any, trainer: Any, module: Any) -> None:
            samplers = [sampler_facts(loader) for loader in train_loaders(trainer)]
            by_sampler[0] = bool(samplers) and all(f["kind"] == "distributed" for f in samplers)
            facts = {"fit": fits[0], "epoch": trainer.current_epoch, "samplers": samplers}
            observe(check.name, trainer, {**facts, "world_size": trainer.world_size})

        def on_train_batch_start(self: Any, trainer: Any, module: Any, batch: Any, *a: Any) -> None:
            facts = {
                "fit": fits[0],
                "epoch": trainer.current_epoch,
                "rows": [] if by_sampler[0] else row_hashes(batch, cache),
            }
            observe(check.name, trainer, facts)

        def on_train_epoch_end(self: Any, trainer: Any, module: Any) -> None:
            observe(check.name, trainer, {"fit": fits[0], "epoch": trainer.current_epoch, "end": 1})

        def forget(self: Any, *args: Any, **kwargs: Any) -> None:
            cache.clear()  # nothing outlives the fit

        hooks = {
            "on_fit_start": on_fit_start,
            "on_train_epoch_start": on_train_epoch_start,
            "on_train_batch_start": on_train_batch_start,
            "on_train_epoch_end": on_train_epoch_end,
            "on_exception": forget,
            "teardown": forget,
        }
        return observer_class("DisjointShardsObserver", hooks)()

    def judge(self, evidence: Evidence) -> list[Violation]:
        epochs: dict[Epoch, _EpochSeen] = defaultdict(_EpochSeen)
        for event, facts in evidence.observations(self.name):
            epochs[(int(facts.get("fit", 0)), int(facts["epoch"]))].add(event, facts)
        # A batch read twice or lost by a fault: the samplers still decide, content and
        # counts no longer say anything of the program.
        by_samplers_only = bool(data_altered(evidence))
        for (_, epoch), seen in sorted(epochs.items()):
            violation = self._epoch(epoch, seen, by_samplers_only)
            if violation is not None:
                return [violation]
        return []

    def _epoch(self, epoch: int, seen: _EpochSeen, by_samplers_only: bool) -> Violation | None:
        ranks = sorted(seen.rows)
        if len(ranks) < 2:
            return None
        if seen.finished_by_all() and not by_samplers_only:
            counts = {rank: seen.batches[rank] for rank in ranks}
            if len(set(counts.values())) > 1:
                low, high = min(counts, key=counts.get), max(counts, key=counts.get)  # type: ignore[arg-type]
                return Violation(
                    self.name,
                    f"in epoch {epoch} rank {low} saw {counts[low]} batches, "
                    f"rank {high} saw {counts[high]}",
                    rank=low,
                    cause=self.cause,
                )
        sharded = seen.sharded_by_samplers()
        if sharded is True:
            return None
        if isinstance(sharded, str):
            return Violation(self.name, f"in epoch {epoch} {sharded}", cause=self.sampler_cause)
        return None if by_samplers_only else self._by_content(epoch, seen.rows)

    def _by_content(
        self, epoch: int, rows: dict[int, list[tuple[int | None, int]]]
    ) -> Violation | None:
        """Samples unique in each rank's stream that another rank saw too, when they are
        many and most of a rank's: what every rank reading everything looks like."""
        counts = {rank: Counter(row for _, row in rows[rank]) for rank in rows}
        owner: dict[int, tuple[int, int | None]] = {}
        shared: list[tuple[int, int, int, int | None]] = []
        for rank in sorted(rows):
            for step, row in rows[rank]:
                if counts[rank][row] > 1:
                    continue  # content this rank saw twice: duplicated data, no identity
                first = owner.get(row)
                if first is not None and first[0] != rank and counts[first[0]][row] == 1:
                    shared.append((row, first[0], rank, step))
                owner.setdefault(row, (rank, step))
        smallest = min(len(stream) for stream in rows.values())
        if len(shared) <= len(rows) - 1 or 2 * len(shared) < smallest:
            return None
        row, first_rank, second, step = shared[0]
        return Violation(
            self.name,
            f"in epoch {epoch} {len(shared)} samples were seen by more than one rank "
            f"(e.g. sample {row & 0xFFFFFFFFFFFFFFFF:016x} on rank {first_rank} and rank {second})",
            rank=second,
            step=step,
            cause=self.cause,
        )


class _EpochSeen:
    """What the ranks reported of one epoch of one fit: samplers, rows, batches, ends."""

    def __init__(self) -> None:
        self.samplers: dict[int, tuple[int, list[dict[str, Any]]]] = {}
        self.rows: dict[int, list[tuple[int | None, int]]] = defaultdict(list)
        self.batches: dict[int, int] = defaultdict(int)
        self.finished: set[int] = set()

    def add(self, event: Any, facts: dict[str, Any]) -> None:
        if "samplers" in facts:
            self.samplers[event.rank] = (int(facts["world_size"]), list(facts["samplers"]))
        elif facts.get("end"):
            self.finished.add(event.rank)
        else:
            self.rows[event.rank] += [(event.step, row) for row in facts["rows"]]
            self.batches[event.rank] += 1

    def finished_by_all(self) -> bool:
        return set(self.rows) <= self.finished

    def sharded_by_samplers(self) -> bool | str | None:
        """True: every rank's every train loader draws through a DistributedSampler and
        the ranks take different parts; a sentence when they take the same part; None
        when the samplers do not decide it (content must)."""
        ranks = sorted(self.rows)
        if not ranks or any(rank not in self.samplers for rank in ranks):
            return None
        loaders = {len(self.samplers[rank][1]) for rank in ranks}
        if len(loaders) != 1 or loaders == {0}:
            return None
        for index in range(loaders.pop()):
            parts = {rank: self.samplers[rank][1][index] for rank in ranks}
            if any(part.get("kind") != "distributed" for part in parts.values()):
                return None
            world = self.samplers[ranks[0]][0]
            taken = [(part["rank"], part["replicas"]) for part in parts.values()]
            if len(set(taken)) < len(taken) or any(n != world for _, n in taken):
                return (
                    "the ranks' DistributedSamplers draw "
                    + ", ".join(
                        f"rank {rank}: part {p['rank']} of {p['replicas']}"
                        for rank, p in parts.items()
                    )
                    + f" (world size {world})"
                )
        return True


def train_loaders(trainer: Any) -> list[Any]:
    """The fit's train DataLoaders, in order (a CombinedLoader's, a list's, a dict's)."""
    return stage_loaders(trainer, "train")


# The Trainer's property that holds a stage's loaders, by Lightning's stage prefix.
STAGE_LOADERS = {
    "train": "train_dataloader",
    "val": "val_dataloaders",
    "test": "test_dataloaders",
    "predict": "predict_dataloaders",
}


def stage_loaders(trainer: Any, stage: str) -> list[Any]:
    """A stage's DataLoaders as Lightning readied them, in order."""
    try:
        loaders = getattr(trainer, STAGE_LOADERS[stage])
    except Exception:  # not set up yet, or a Lightning without the property
        return []
    found: list[Any] = []
    _collect_loaders(loaders, found)
    return found


def _collect_loaders(value: Any, found: list[Any]) -> None:
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for item in value:
            _collect_loaders(item, found)
    elif value is not None and hasattr(value, "dataset"):
        found.append(value)


def sampler_facts(loader: Any) -> dict[str, Any]:
    """How a DataLoader picks its samples: through a DistributedSampler (which part of how
    many), from an IterableDataset, or otherwise."""
    from torch.utils.data import IterableDataset
    from torch.utils.data.distributed import DistributedSampler

    if isinstance(getattr(loader, "dataset", None), IterableDataset):
        return {"kind": "iterable"}
    sampler: Any = getattr(loader, "batch_sampler", None) or getattr(loader, "sampler", None)
    for _ in range(4):  # a batch sampler around a sampler around ...
        if isinstance(sampler, DistributedSampler):
            return {"kind": "distributed", "rank": sampler.rank, "replicas": sampler.num_replicas}
        sampler = getattr(sampler, "sampler", None)
    return {"kind": "other"}


def multipliers(count: int, device: Any, cache: dict[Any, Any] | None) -> Any:
    """``count`` fixed odd 64-bit multipliers on ``device`` (seeded: the same on every rank)."""
    import torch

    key = (count, str(device))
    if cache is None or key not in cache:
        generator = torch.Generator().manual_seed(0x5EED)
        fresh = torch.randint(-(2**62), 2**62, (count,), generator=generator) * 2 + 1
        if cache is None:
            return fresh.to(device)
        cache[key] = fresh.to(device)
    return cache[key]
