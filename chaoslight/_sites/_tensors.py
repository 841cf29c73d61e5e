"""Tensor helpers for site behaviours. torch is imported lazily, on first use."""

from __future__ import annotations

from typing import Any


def poison(obj: Any, value: float) -> Any:
    """Return ``obj`` with every floating-point tensor in it replaced by ``t * value``.

    Out of place and differentiable: a loss multiplied by NaN is NaN and so is every
    gradient through it (adding NaN would leave the gradients finite).
    Dicts, lists and tuples are rebuilt; integer tensors (labels, indices) are kept.
    """
    import torch

    if isinstance(obj, torch.Tensor):
        return obj * value if obj.is_floating_point() else obj
    if isinstance(obj, dict):
        return type(obj)((k, poison(v, value)) for k, v in obj.items())
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(poison(v, value) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(poison(v, value) for v in obj)
    return obj


def poison_in_place(obj: Any, value: float) -> None:
    """Fill floating-point tensors in ``obj`` (a tensor or a list of them) in place."""
    import torch

    items = obj if isinstance(obj, (list, tuple)) else [obj]
    with torch.no_grad():
        for item in items:
            if isinstance(item, torch.Tensor) and item.is_floating_point():
                item.mul_(value)
