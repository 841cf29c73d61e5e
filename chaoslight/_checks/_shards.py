"""The data-sharding check: in each epoch of each fit, no two ranks see the same sample,
and every rank that finished the epoch saw as many batches."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from chaoslight._checks._base import Check, Evidence, Violation, observe, observer_class
from chaoslight._checks._invariants import quietly

Epoch = tuple[int, int]  # (fit, epoch): the fits of one process count from 0


def row_hashes(batch: Any, cache: dict[Any, Any] | None = None) -> list[int]:
    """A 64-bit fingerprint of each sample (row) of the batch's first tensor.

    One vectorised multiply-and-sum over the rows' bytes (integer overflow wraps), so a
    batch of 64 samples costs one small kernel, not 64 calls into a hash library. The
    multipliers are kept in ``cache`` when given (the observer's, emptied after each fit).
    """
    import torch

    tensor = first_tensor(batch)
    if tensor is None or tensor.dim() == 0 or tensor.shape[0] == 0:
        return []
    with torch.no_grad(), quietly():
        rows = tensor.reshape(tensor.shape[0], -1)
        if not rows.is_contiguous() or rows.storage_offset() * rows.element_size() % 8:
            rows = rows.clone(memory_format=torch.contiguous_format)  # aligned, as a copy
        # The widest integer view the row's bytes allow: fewer elements to multiply.
        wide = rows.shape[1] * rows.element_size() % 8 == 0
        data = rows.view(torch.int64) if wide else rows.view(torch.uint8).to(torch.int64)
        fingerprints = (data * multipliers(data.shape[1], data.device, cache)).sum(dim=1)
        values: list[int] = fingerprints.tolist()
    return values


class DisjointShards(Check):
    """In each epoch, no two ranks see the same sample and every rank sees as many batches.

    DistributedSampler pads the last round by repeating up to ``world_size - 1`` samples,
    so that many shared samples per epoch are allowed: false alarms are worse than misses.
    Epochs are told apart by fit too (two fits in one process each have an epoch 0), and
    batch counts are compared only over epochs every rank finished: a run a fault or a hang
    cut short leaves its last epoch unequal, and that is not a sharding bug.
    """

    name = "disjoint-shards"
    cause = "no DistributedSampler, or an IterableDataset that does not shard by rank"

    def observer(self) -> Any:
        check = self
        cache: dict[Any, Any] = {}  # this fit's hash multipliers
        fits = [-1]

        def on_fit_start(self: Any, trainer: Any, module: Any) -> None:
            fits[0] += 1

        def on_train_batch_start(self: Any, trainer: Any, module: Any, batch: Any, *a: Any) -> None:
            facts = {
                "fit": fits[0],
                "epoch": trainer.current_epoch,
                "rows": row_hashes(batch, cache),
            }
            observe(check.name, trainer, facts)

        def on_train_epoch_end(self: Any, trainer: Any, module: Any) -> None:
            observe(check.name, trainer, {"fit": fits[0], "epoch": trainer.current_epoch, "end": 1})

        def forget(self: Any, *args: Any, **kwargs: Any) -> None:
            cache.clear()  # nothing outlives the fit

        hooks = {
            "on_fit_start": on_fit_start,
            "on_train_batch_start": on_train_batch_start,
            "on_train_epoch_end": on_train_epoch_end,
            "on_exception": forget,
            "teardown": forget,
        }
        return observer_class("DisjointShardsObserver", hooks)()

    def judge(self, evidence: Evidence) -> list[Violation]:
        rows: dict[Epoch, dict[int, list[tuple[int | None, int]]]] = defaultdict(
            lambda: defaultdict(list)
        )
        batches: dict[Epoch, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        finished: dict[Epoch, set[int]] = defaultdict(set)
        for event, facts in evidence.observations(self.name):
            key = (int(facts.get("fit", 0)), int(facts["epoch"]))
            if facts.get("end"):
                finished[key].add(event.rank)
                continue
            rows[key][event.rank] += [(event.step, row) for row in facts["rows"]]
            batches[key][event.rank] += 1
        for key in sorted(rows):
            complete = set(rows[key]) <= finished[key]
            violation = self._epoch(key[1], rows[key], batches[key] if complete else None)
            if violation is not None:
                return [violation]
        return []

    def _epoch(
        self,
        epoch: int,
        rows: dict[int, list[tuple[int | None, int]]],
        batches: dict[int, int] | None,
    ) -> Violation | None:
        ranks = sorted(rows)
        if len(ranks) < 2:
            return None
        counts = {rank: batches[rank] for rank in ranks} if batches is not None else {}
        if len(set(counts.values())) > 1:
            low = min(counts, key=counts.__getitem__)
            return Violation(
                self.name,
                f"in epoch {epoch} rank {low} saw {counts[low]} batches, "
                f"rank {max(counts, key=counts.__getitem__)} saw {max(counts.values())}",
                rank=low,
                cause=self.cause,
            )
        owner: dict[int, tuple[int, int | None]] = {}
        shared: list[tuple[int, int, int, int | None]] = []
        for rank in ranks:
            for step, row in rows[rank]:
                if row in owner and owner[row][0] != rank:
                    shared.append((row, owner[row][0], rank, step))
                owner.setdefault(row, (rank, step))
        if len(shared) > len(ranks) - 1:
            row, first, second, step = shared[0]
            return Violation(
                self.name,
                f"in epoch {epoch} {len(shared)} samples were seen by more than one rank "
                f"(e.g. sample {row & 0xFFFFFFFFFFFFFFFF:016x} on rank {first} and rank {second})",
                rank=second,
                step=step,
                cause=self.cause,
            )
        return None


def first_tensor(batch: Any) -> Any:
    import torch

    if isinstance(batch, torch.Tensor):
        return batch
    items = batch.values() if isinstance(batch, dict) else batch
    items = items if isinstance(batch, (dict, list, tuple)) else ()
    return next((found for item in items if (found := first_tensor(item)) is not None), None)


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
