"""Replicas in sync, and the checksums that compare tensors across ranks and runs."""

from __future__ import annotations

import contextlib
import sys
from collections import defaultdict
from typing import Any

from chaoslight._checks._base import (
    CANNOT_JUDGE,
    Check,
    Evidence,
    Violation,
    cannot_judge,
    observe,
    observer_class,
)
from chaoslight._runtime._inject import active
from chaoslight._schedule._validate import check_bool, check_tolerance


def quietly() -> Any:
    """chaoslight's own tensor work (checksums) must not reach any site or sync point."""
    injection = active()
    engine = injection.engine if injection is not None else None
    return engine.internal() if engine is not None else contextlib.nullcontext()


# Elements summed per kernel call. A block's float64 copy stays in cache, and no float64
# copy of a whole tensor is made (on CPU a fresh large buffer costs more in page faults
# than the sums). Accelerators take bigger blocks, for fewer launches.
BLOCK_CPU = 1 << 18
BLOCK_ACCELERATOR = 1 << 22


def local_shard(tensor: Any) -> Any:
    """The part of a tensor this rank holds: a DTensor's local shard (FSDP2's
    ``fully_shard`` parameters: summing the whole would be a collective, and reshaping it
    is refused), any other tensor itself. Per rank, the same rank's shard in two runs is
    comparable; shards of different ranks are not."""
    module = sys.modules.get("torch.distributed.tensor")
    dtensor = getattr(module, "DTensor", None)
    return tensor.to_local() if dtensor is not None and isinstance(tensor, dtensor) else tensor


# Lightning's strategies whose ranks hold shards of the parameters, not replicas.
SHARDING_STRATEGIES = frozenset({"FSDPStrategy", "ModelParallelStrategy"})
# Why replicas-in-sync judges nothing of a loop whose first optimizer step found no
# DistributedDataParallel module of more than one rank to compare.
NO_REPLICAS = (
    "no DistributedDataParallel module of more than one rank trains in this loop (FSDP "
    "shards the parameters; a module with a communication hook of its own, such as local "
    "SGD, is left out): no replicas to compare"
)


def shards_parameters(strategy: Any) -> bool:
    """Whether a Trainer's strategy shards the parameters across the ranks (FSDP, FSDP2
    and tensor parallelism): each rank's parameters are its own shard, never a replica."""
    return any(cls.__name__ in SHARDING_STRATEGIES for cls in type(strategy).__mro__)


def summaries(tensors: list[Any], bits: bool = False) -> list[list[Any]]:
    """Per tensor: its float64 sum, its position-weighted float64 sum (weights 1, 2, ...)
    and, with ``bits``, the sum modulo 2**64 of the float64 values' bit patterns: exact,
    so any changed value moves it (float64 holds every float16, bfloat16 and float32
    value, and every integer up to 2**53, exactly).

    A tensor of more than ``BLOCK_*`` elements is summed block by block in one float64
    scratch buffer; the block at offset ``o`` adds ``o * its sum`` to the weighted sum, so
    one weight vector serves every size, and nothing outlives the call. A device's partial
    sums leave it in one transfer (per kind) and are added up in the same order on every
    rank.
    """
    import torch

    flats = [local_shard(t).detach() for t in tensors]
    flats = [(torch.view_as_real(t) if t.is_complex() else t).reshape(-1) for t in flats]
    result: list[list[Any]] = [[0.0, 0.0] + ([0] if bits else []) for _ in flats]
    with quietly():
        for device in dict.fromkeys(flat.device for flat in flats):
            mine = [i for i, flat in enumerate(flats) if flat.device == device]
            width = BLOCK_CPU if device.type == "cpu" else BLOCK_ACCELERATOR
            width = min(width, max(1, *(flats[i].numel() for i in mine)))
            weights = torch.arange(1, width + 1, dtype=torch.float64, device=device)
            scratch, partial, ints, blocks = None, [], [], []
            for i in mine:
                flat, size = flats[i], flats[i].numel()
                for start in range(0, size, width):
                    if size <= width:  # one block: a small float64 copy
                        block = flat.to(torch.float64)
                    else:
                        if scratch is None:
                            scratch = torch.empty(width, dtype=torch.float64, device=device)
                        block = scratch.narrow(0, 0, min(width, size - start))
                        block.copy_(flat.narrow(0, start, block.numel()))
                    partial += [block.sum(), torch.dot(block, weights.narrow(0, 0, block.numel()))]
                    ints += [block.view(torch.int64).sum()] if bits else []  # wraps: exact
                    blocks.append((i, start))
            sums = torch.stack(partial).tolist() if partial else []
            for (i, start), part, dot in zip(blocks, sums[::2], sums[1::2], strict=True):
                result[i][0] += part
                result[i][1] += dot + start * part if start else dot  # 0 * inf is NaN
            word_sums = torch.stack(ints).tolist() if ints else []
            for (i, _), word in zip(blocks if bits else [], word_sums, strict=True):
                result[i][2] = (result[i][2] + word) % 2**64
    return result


def checksums(module: Any, buffers: bool = False) -> tuple[list[str], list[list[float]]]:
    """Per parameter (and buffer on request): its float64 sum and position-weighted sum.

    A one-ulp change of one float32 element moves the float64 sum unless the element is
    about 2**29 times smaller than the sums it is added to (float64 keeps 29 more bits);
    the weighted sum catches what cancels in the plain sum (two elements swapped).
    """
    items = list(module.named_parameters())
    if buffers:
        items += list(module.named_buffers())
    return [name for name, _ in items], summaries([tensor.detach() for _, tensor in items])


class ReplicasInSync(Check):
    """After every optimizer step, the ranks' parameters (and buffers on request) agree.

    At ``atol=0`` the comparison is exact: besides the two float64 sums, each rank sends
    the sum modulo 2**64 of each tensor's values' float64 bit patterns, which any changed
    value moves (see ``summaries``).
    """

    name = "replicas-in-sync"
    cause = (
        "a weight edited on one rank only (a @rank_zero_only callback, an update outside "
        "the optimizer) or a skipped gradient sync"
    )
    frozen_cause = (
        "a parameter that did not require grad when DDP wrapped the model, trained later: "
        "DDP all-reduces only the gradients of the parameters that required grad when it "
        "was built (Lightning's BackboneFinetuning unfreezes this way: Lightning issue "
        "#20340). Unfreeze before fit, or freeze by zeroing the learning rate instead"
    )

    def __init__(self, atol: float = 0.0, buffers: bool = False) -> None:
        self.atol = check_tolerance("atol", atol)
        self.buffers = check_bool("buffers", buffers)

    def observer(self) -> Any:
        check = self
        fits = [-1]  # steps count from 0 again in each fit of the process

        def on_fit_start(self: Any, trainer: Any, module: Any) -> None:
            fits[0] += 1

        def on_train_start(self: Any, trainer: Any, module: Any) -> None:
            # DDP is built by now: what is frozen here gets no gradient sync, ever.
            frozen = [name for name, p in module.named_parameters() if not p.requires_grad]
            if frozen and trainer.world_size > 1:
                observe(check.name, trainer, {"fit": fits[0], "frozen": frozen})

        def on_train_batch_end(self: Any, trainer: Any, module: Any, *args: Any) -> None:
            if trainer.world_size < 2 or shards_parameters(trainer.strategy):
                return  # one replica, or none (each rank holds a shard): nothing to compare
            items = list(module.named_parameters())
            parameters = len(items)
            items += list(module.named_buffers()) if check.buffers else []
            tensors = [tensor.detach() for _, tensor in items]
            sums, sizes = summaries(tensors, bits=True), [t.numel() for t in tensors]
            names = [n for n, _ in items]
            facts = {"fit": fits[0], "names": names, "sums": sums, "sizes": sizes}
            # What the replicas' updates depend on besides the gradient: for the cause.
            facts |= {"parameters": parameters, "optimizer_steps": trainer.global_step}
            facts["lrs"] = learning_rates(trainer)
            observe(check.name, trainer, facts)

        # In a loop no Trainer runs: the replicas are the DistributedDataParallel modules
        # (DDP broadcasts rank 0's state when built and averages every gradient, so a
        # correct program keeps them equal after every optimizer step), found once, at
        # the loop's first optimizer step. A module with a communication hook of the
        # program's own (local SGD averages the parameters only now and then) is left out.
        loop: dict[str, Any] = {"modules": None, "steps": 0, "backwards": 0, "said": False}

        def on_loop_backward(self: Any, tensors: Any) -> None:
            loop["backwards"] += 1

        def on_loop_after_optimizer_step(self: Any, optimizer: Any) -> None:
            loop["steps"] += 1
            if loop["modules"] is None:
                loop["modules"] = ddp_modules()
            modules = [m for ref in loop["modules"] if (m := ref()) is not None]
            modules = [m for m in modules if not getattr(m, "_comm_hooks", None)]
            if not modules:
                if not loop["said"]:
                    loop["said"] = True
                    cannot_judge(check.name, NO_REPLICAS)
                return
            several = len(modules) > 1
            items = [
                (f"{index}.{name}" if several else name, tensor)
                for index, ddp in enumerate(modules)
                for name, tensor in ddp.module.named_parameters()
            ]
            tensors = [tensor.detach() for _, tensor in items]
            sums, sizes = summaries(tensors, bits=True), [t.numel() for t in tensors]
            facts = {"fit": 0, "names": [n for n, _ in items], "sums": sums, "sizes": sizes}
            facts |= {"parameters": len(items), "optimizer_steps": loop["steps"]}
            facts["backwards"] = loop["backwards"]  # a step skipped shows as more of these
            facts["lrs"] = rates_of([optimizer])
            observe(check.name, None, facts)

        hooks = {
            "on_fit_start": on_fit_start,
            "on_train_start": on_train_start,
            "on_train_batch_end": on_train_batch_end,
            "on_loop_backward": on_loop_backward,
            "on_loop_after_optimizer_step": on_loop_after_optimizer_step,
        }
        return observer_class("ReplicasInSyncObserver", hooks)()

    def judge(self, evidence: Evidence) -> list[Violation]:
        by_step: dict[tuple[int, int], dict[int, dict[str, Any]]] = defaultdict(dict)
        frozen: dict[int, set[str]] = defaultdict(set)  # by fit: frozen when DDP was built
        for event, facts in evidence.observations(self.name):
            if CANNOT_JUDGE in facts:
                continue
            if "frozen" in facts:
                frozen[int(facts.get("fit", 0))].update(facts["frozen"])
                continue
            key = (int(facts.get("fit", 0)), -1 if event.step is None else event.step)
            by_step[key].setdefault(event.rank, facts)
        history: dict[int, list[tuple[int, dict[int, dict[str, Any]]]]] = defaultdict(list)
        for fit, step in sorted(by_step):
            ranks = by_step[(fit, step)]
            if len(ranks) < 2:
                continue
            history[fit].append((step, ranks))
            found = self._compare(ranks)
            if found is not None:
                name, kind, rank, largest = found
                cause = self.frozen_cause if name in frozen[fit] else _cause(history[fit])
                message = (
                    f"{kind} {name!r} differs between rank {min(ranks)} and rank {rank} "
                    f"after the optimizer step (largest checksum difference {largest:.3g})"
                )
                step_ = None if step < 0 else step
                return [Violation(self.name, message, rank=rank, step=step_, cause=cause)]
        return []

    def _compare(self, ranks: dict[int, dict[str, Any]]) -> tuple[str, str, int, float] | None:
        """The first tensor that differs: (name, parameter or buffer, rank, largest diff)."""
        base = ranks[min(ranks)]
        for rank in sorted(ranks):
            other = ranks[rank]
            pairs = zip(
                base["names"], base["sums"], other["sums"], base.get("sizes", ()), strict=False
            )
            for index, (name, mine, theirs, size) in enumerate(pairs):
                if not self._differ(mine, theirs, size):
                    continue
                largest = max(
                    abs(a[0] - b[0]) for a, b in zip(base["sums"], other["sums"], strict=False)
                )
                parameters = base.get("parameters", len(base["names"]))
                return name, "parameter" if index < parameters else "buffer", rank, largest
        return None

    def _differ(self, mine: list[float], theirs: list[float], size: int) -> bool:
        """Bitwise at atol=0; else the mean element may move by atol (sum by size * atol)."""
        if self.atol == 0.0:  # bitwise (the word sums): equal bits give the same NaN sums
            return any(a != b and (a == a or b == b) for a, b in zip(mine, theirs, strict=False))
        return abs(mine[0] - theirs[0]) > self.atol * max(size, 1)


def ddp_modules() -> list[Any]:
    """Weak references to the live ``DistributedDataParallel`` modules of more than one
    rank (read once per run: a scan of the objects the collector tracks)."""
    import gc
    import weakref

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
        return []
    found = [o for o in gc.get_objects() if isinstance(o, DistributedDataParallel)]
    return [weakref.ref(module) for module in found]


def _rate(rate: Any) -> float | None:
    try:
        return None if rate is None else float(rate)
    except (TypeError, ValueError):
        return None


def rates_of(optimizers: Any) -> list[float | None]:
    """Every param group's learning rate, optimizer by optimizer."""
    return [
        _rate(group.get("lr"))
        for optimizer in optimizers or []
        for group in getattr(optimizer, "param_groups", [])
    ]


def learning_rates(trainer: Any) -> list[float | None]:
    """Every param group's learning rate of the Trainer's optimizers."""
    return rates_of(getattr(trainer, "optimizers", []))


def _apart(ranks: dict[int, dict[str, Any]], key: str) -> str:
    """'rank 0 2, rank 1 3' where every rank recorded ``key`` and they differ; else ''."""
    counts = {rank: facts.get(key) for rank, facts in ranks.items()}
    if None in counts.values() or len(set(counts.values())) < 2:
        return ""
    return ", ".join(f"rank {rank} {count}" for rank, count in sorted(counts.items()))


def _cause(history: list[tuple[int, dict[int, dict[str, Any]]]]) -> str:
    """Why replicas parted, from the first step at which the ranks' optimizer step counts or
    learning rates differed; else the usual suspects."""
    for step, ranks in history:
        steps = _apart(ranks, "optimizer_steps")
        if steps:
            return (
                f"the ranks took different numbers of optimizer steps (by step {step}: "
                f"{steps}): an optimizer step skipped on one rank (a rank-local condition "
                "around opt.step(), or a training_step that returned None on one rank)"
            )
        # A loop's step is its k-th optimizer step: one skipped shows as more backwards.
        backwards = _apart(ranks, "backwards")
        if backwards:
            return (
                f"the ranks reached their optimizer step {step} after different numbers of "
                f"backward passes ({backwards}): an optimizer step skipped on one rank (a "
                "rank-local condition around optimizer.step())"
            )
        rates = {rank: facts.get("lrs") for rank, facts in ranks.items()}
        if None not in rates.values() and len({repr(r) for r in rates.values()}) > 1:
            seen = ", ".join(f"rank {rank} {lrs}" for rank, lrs in sorted(rates.items()))
            return (
                f"the learning rates differ (by step {step}: {seen}): a scheduler stepped on "
                "one rank only, or a learning rate set from a rank-local value (a "
                "ReduceLROnPlateau fed an unsynced metric)"
            )
    return ReplicasInSync.cause
