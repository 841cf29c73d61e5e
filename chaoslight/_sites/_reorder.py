"""ReorderReduction for ``all_reduce``: gather every rank's contribution, sum in an order.

Every rank must take part in the same collective, so when a reorder fault's trigger
matches (whatever its rank), *all* ranks replace the all-reduce with an all-gather and a
local sum; the targeted rank sums in the fault's order, the others in rank order. So a
per-rank order makes replicas bitwise different, which is how identical runs drift.
"""

from __future__ import annotations

from typing import Any

from chaoslight._schedule._faults import permutation
from chaoslight._sites._core import Call, DroppedWork

NATURAL = "natural"


def ordered_sum(parts: list[Any], order: str) -> Any:
    """Sum ``parts`` (one tensor per rank) in the named order; float bits depend on it."""
    world = len(parts)
    if order == NATURAL:
        return _sequential(parts, list(range(world)))
    if order == "reversed":
        return _sequential(parts, list(reversed(range(world))))
    if order == "tree":
        return _tree(parts)
    if order == "chunked":
        return _chunked(parts)
    if order == "compressed":
        import torch

        dtype = parts[0].dtype
        rounded = [p.to(torch.bfloat16).to(dtype) for p in parts]
        return _sequential(rounded, list(range(world)))
    if order == "premultiplied":
        # NCCL's pre-multiplied average: scale each contribution, then sum, then rescale.
        return _sequential([p / world for p in parts], list(range(world))) * world
    ranks = permutation(order) or ()
    ranks = tuple(r for r in ranks if r < world) + tuple(r for r in range(world) if r not in ranks)
    return _sequential(parts, list(ranks))


def _sequential(parts: list[Any], ranks: list[int]) -> Any:
    total = parts[ranks[0]].clone()
    for rank in ranks[1:]:
        total = total + parts[rank]
    return total


def _tree(parts: list[Any]) -> Any:
    level = list(parts)
    while len(level) > 1:
        paired = [level[i] + level[i + 1] for i in range(0, len(level) - 1, 2)]
        level = paired + ([level[-1]] if len(level) % 2 else [])
    return level[0].clone()


def _chunked(parts: list[Any]) -> Any:
    """Each half of the flattened tensor is summed in its own order, as ring chunks are."""
    import torch

    flat = [p.reshape(-1) for p in parts]
    middle = flat[0].numel() // 2
    first = _sequential([f[:middle] for f in flat], list(range(len(flat))))
    second = _sequential([f[middle:] for f in flat], list(reversed(range(len(flat)))))
    return torch.cat([first, second]).reshape(parts[0].shape)


def reorder_all_reduce(
    wrapped: Call, args: tuple[Any, ...], kwargs: dict[str, Any], order: str
) -> Any:
    import torch
    import torch.distributed as dist

    tensor = args[0] if args else kwargs["tensor"]
    op = args[1] if len(args) > 1 else kwargs.get("op", dist.ReduceOp.SUM)
    group = args[2] if len(args) > 2 else kwargs.get("group")
    if op != dist.ReduceOp.SUM or not dist.is_initialized() or not tensor.is_floating_point():
        return wrapped(*args, **kwargs)
    if tensor.is_sparse:  # gloo gathers no sparse tensor: summed as the backend does
        return wrapped(*args, **kwargs)
    world = dist.get_world_size(group)
    parts = [torch.empty_like(tensor) for _ in range(world)]
    dist.all_gather(parts, tensor.contiguous(), group=group)
    with torch.no_grad():
        tensor.copy_(ordered_sum(parts, order))
    async_op = args[3] if len(args) > 3 else kwargs.get("async_op", False)
    return DroppedWork() if async_op else None
