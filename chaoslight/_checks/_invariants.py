"""Checks on what every rank sees step by step: replicas, losses, gradients, shards."""

from __future__ import annotations

import contextlib
from collections import defaultdict
from typing import Any

from chaoslight._checks._base import Check, Evidence, Violation, observe, observer_class
from chaoslight._runtime._inject import active
from chaoslight._schedule._errors import InvalidArgument
from chaoslight._schedule._validate import check_tolerance


def _quietly() -> Any:
    """chaoslight's own tensor work (checksums) must not reach any site or sync point."""
    injection = active()
    engine = injection.engine if injection is not None else None
    return engine.internal() if engine is not None else contextlib.nullcontext()


_WEIGHTS: dict[tuple[int, str], Any] = {}


def _weights(numel: int, device: Any) -> Any:
    """1, 2, ..., numel in float64 on ``device``, made once per size and device."""
    import torch

    key = (numel, str(device))
    if key not in _WEIGHTS:
        if len(_WEIGHTS) > 256:
            _WEIGHTS.clear()
        _WEIGHTS[key] = torch.arange(1, numel + 1, dtype=torch.float64, device=device)
    return _WEIGHTS[key]


def checksums(module: Any, buffers: bool = False) -> tuple[list[str], list[list[float]]]:
    """Per tensor: its float64 sum and a position-weighted sum. Two numbers cross, not weights.

    A one-ulp change of one float32 element moves the float64 sums (float64 keeps 29 more
    bits); the weighted sum catches changes that cancel in the plain sum. All the sums
    leave the device in one transfer.
    """
    import torch

    items = list(module.named_parameters())
    if buffers:
        items += list(module.named_buffers())
    if not items:
        return [], []
    with torch.no_grad(), _quietly():
        pairs = []
        for _, tensor in items:
            flat = tensor.detach().reshape(-1).double()
            pairs.append(
                torch.stack([flat.sum(), torch.dot(flat, _weights(flat.numel(), flat.device))])
            )
        values = torch.stack(pairs).cpu().tolist()
    return [name for name, _ in items], values


class ReplicasInSync(Check):
    """After every optimizer step, the ranks' parameters (and buffers on request) agree."""

    name = "replicas-in-sync"
    cause = (
        "a weight edited on one rank only (a @rank_zero_only callback, an update outside "
        "the optimizer) or a skipped gradient sync"
    )

    def __init__(self, atol: float = 0.0, buffers: bool = False) -> None:
        self.atol = check_tolerance("atol", atol)
        if not isinstance(buffers, bool):
            raise InvalidArgument(f"buffers={buffers!r} must be True or False")
        self.buffers = buffers

    def observer(self) -> Any:
        check = self

        def on_train_batch_end(self: Any, trainer: Any, module: Any, *args: Any) -> None:
            if trainer.world_size < 2:
                return  # one replica: nothing to compare, nothing to pay
            names, sums = checksums(module, check.buffers)
            sizes = [t.numel() for _, t in module.named_parameters()]
            if check.buffers:
                sizes += [t.numel() for _, t in module.named_buffers()]
            observe(check.name, trainer, {"names": names, "sums": sums, "sizes": sizes})

        return observer_class(
            "ReplicasInSyncObserver", {"on_train_batch_end": on_train_batch_end}
        )()

    def judge(self, evidence: Evidence) -> list[Violation]:
        by_step: dict[int | None, dict[int, dict[str, Any]]] = defaultdict(dict)
        for event, facts in evidence.observations(self.name):
            by_step[event.step].setdefault(event.rank, facts)
        for step in sorted(by_step, key=lambda s: -1 if s is None else s):
            ranks = by_step[step]
            if len(ranks) < 2:
                continue
            violation = self._compare(step, ranks)
            if violation is not None:
                return [violation]
        return []

    def _compare(self, step: int | None, ranks: dict[int, dict[str, Any]]) -> Violation | None:
        base_rank = min(ranks)
        base = ranks[base_rank]
        for rank in sorted(ranks):
            other = ranks[rank]
            pairs = zip(
                base["names"], base["sums"], other["sums"], base.get("sizes", ()), strict=False
            )
            for name, mine, theirs, size in pairs:
                if not self._differ(mine, theirs, size):
                    continue
                largest = max(
                    abs(a[0] - b[0]) for a, b in zip(base["sums"], other["sums"], strict=False)
                )
                return Violation(
                    self.name,
                    f"parameter {name!r} differs between rank {base_rank} and rank {rank} "
                    f"after the optimizer step (largest checksum difference {largest:.3g})",
                    rank=rank,
                    step=step,
                    cause=self.cause,
                )
        return None

    def _differ(self, mine: list[float], theirs: list[float], size: int) -> bool:
        """Bitwise at atol=0; else the mean element may move by atol (sum by size * atol)."""
        if self.atol == 0.0:
            return mine != theirs
        return abs(mine[0] - theirs[0]) > self.atol * max(size, 1)


def _loss_of(outputs: Any) -> Any:
    if isinstance(outputs, dict):
        return outputs.get("loss")
    return outputs


class FiniteLoss(Check):
    """Every training step's loss is finite (no NaN or Inf)."""

    name = "finite-loss"
    cause = "a division by zero or log of zero in the loss, an exploding gradient, bad data"

    def observer(self) -> Any:
        check = self

        def on_train_batch_end(self: Any, trainer: Any, module: Any, outputs: Any, *a: Any) -> None:
            import torch

            loss = _loss_of(outputs)
            if isinstance(loss, torch.Tensor):
                with _quietly():
                    finite = bool(torch.isfinite(loss.detach()).all().cpu())
                if not finite:
                    observe(check.name, trainer, {"value": str(loss.detach().cpu().tolist())})

        return observer_class("FiniteLossObserver", {"on_train_batch_end": on_train_batch_end})()

    def judge(self, evidence: Evidence) -> list[Violation]:
        return _first_bad(self, evidence, lambda facts: f"the loss is {facts['value']}")


def _first_bad(check: Any, evidence: Evidence, describe: Any) -> list[Violation]:
    """One violation for the earliest (step, rank) observation of ``check``, if any."""
    bad = [
        (e.step if e.step is not None else -1, e.rank, f)
        for e, f in evidence.observations(check.name)
    ]
    if not bad:
        return []
    step, rank, facts = min(bad, key=lambda item: (item[0], item[1]))
    return [
        Violation(
            check.name,
            describe(facts),
            rank=rank,
            step=None if step < 0 else step,
            cause=check.cause,
        )
    ]


class FiniteGrads(Check):
    """Before every optimizer step, every gradient is finite."""

    name = "finite-grads"
    cause = "a NaN/Inf loss, an exploding gradient without clipping, a bad custom backward"

    def observer(self) -> Any:
        check = self

        def on_before_optimizer_step(self: Any, trainer: Any, module: Any, optimizer: Any) -> None:
            import torch

            grads = [(n, p.grad) for n, p in module.named_parameters() if p.grad is not None]
            if not grads:
                return
            with _quietly():
                # A NaN or Inf anywhere makes the float64 total non-finite (float64 cannot
                # overflow on float32 gradients): one transfer in the common, finite case.
                total = torch.stack([g.sum(dtype=torch.float64) for _, g in grads]).sum()
                if bool(torch.isfinite(total).cpu()):
                    return
                finite = torch.stack([torch.isfinite(g).all() for _, g in grads]).cpu().tolist()
            for (name, _), ok in zip(grads, finite, strict=True):
                if not ok:
                    observe(check.name, trainer, {"parameter": name})
                    return

        hooks = {"on_before_optimizer_step": on_before_optimizer_step}
        return observer_class("FiniteGradsObserver", hooks)()

    def judge(self, evidence: Evidence) -> list[Violation]:
        return _first_bad(
            self, evidence, lambda facts: f"the gradient of {facts['parameter']!r} is not finite"
        )


def _first_tensor(batch: Any) -> Any:
    import torch

    if isinstance(batch, torch.Tensor):
        return batch
    items = (
        batch.values()
        if isinstance(batch, dict)
        else batch
        if isinstance(batch, (list, tuple))
        else ()
    )
    for item in items:
        found = _first_tensor(item)
        if found is not None:
            return found
    return None


_MULTIPLIERS: dict[str, Any] = {}


def _multipliers(count: int, device: Any) -> Any:
    """Fixed odd 64-bit multipliers (seeded), at least ``count`` of them, on ``device``."""
    import torch

    key = str(device)
    have = _MULTIPLIERS.get(key)
    if have is None or have.numel() < count:
        generator = torch.Generator().manual_seed(0x5EED)
        fresh = torch.randint(-(2**62), 2**62, (max(count, 64),), generator=generator) * 2 + 1
        _MULTIPLIERS[key] = have = fresh.to(device)
    return have[:count]


def row_hashes(batch: Any) -> list[int]:
    """A 64-bit fingerprint of each sample (row) of the batch's first tensor.

    One vectorised multiply-and-sum over the rows' bytes (integer overflow wraps), so a
    batch of 64 samples costs one small kernel, not 64 calls into a hash library.
    """
    import torch

    tensor = _first_tensor(batch)
    if tensor is None or tensor.dim() == 0:
        return []
    with torch.no_grad(), _quietly():
        rows = tensor.detach().contiguous().reshape(tensor.shape[0], -1)
        raw = rows.view(torch.uint8)
        # The widest integer view the row's bytes allow: fewer elements to multiply.
        data = raw.view(torch.int64) if raw.shape[1] % 8 == 0 else raw.to(torch.int64)
        fingerprints = (data * _multipliers(data.shape[1], data.device)).sum(dim=1)
        values: list[int] = fingerprints.cpu().tolist()
    return values


class DisjointShards(Check):
    """In each epoch, no two ranks see the same sample and every rank sees as many batches.

    DistributedSampler pads the last round by repeating up to ``world_size - 1`` samples,
    so that many shared samples per epoch are allowed: false alarms are worse than misses.
    """

    name = "disjoint-shards"
    cause = "no DistributedSampler, or an IterableDataset that does not shard by rank"

    def observer(self) -> Any:
        check = self

        def on_train_batch_start(self: Any, trainer: Any, module: Any, batch: Any, *a: Any) -> None:
            observe(
                check.name, trainer, {"epoch": trainer.current_epoch, "rows": row_hashes(batch)}
            )

        return observer_class(
            "DisjointShardsObserver", {"on_train_batch_start": on_train_batch_start}
        )()

    def judge(self, evidence: Evidence) -> list[Violation]:
        seen: dict[int, dict[int, list[tuple[int | None, int]]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for event, facts in evidence.observations(self.name):
            seen[facts["epoch"]][event.rank] += [(event.step, row) for row in facts["rows"]]
        batches: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        for event, facts in evidence.observations(self.name):
            batches[facts["epoch"]][event.rank] += 1
        for epoch in sorted(seen):
            violation = self._epoch(epoch, seen[epoch], batches[epoch])
            if violation is not None:
                return [violation]
        return []

    def _epoch(
        self, epoch: int, rows: dict[int, list[tuple[int | None, int]]], batches: dict[int, int]
    ) -> Violation | None:
        ranks = sorted(rows)
        if len(ranks) < 2:
            return None
        counts = {rank: batches[rank] for rank in ranks}
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
