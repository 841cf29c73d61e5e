"""Flipping one bit of one element of a training tensor in place (a ``flip`` fault).

The element is chosen from the fault's numbers alone (the ``tensor``-th tensor of the
target family, its ``index``-th element, each modulo their count), so every replay of a
schedule flips the same bit. torch is imported lazily, on first use.
"""

from __future__ import annotations

from typing import Any

# Integer views of the same width, to flip a float's bit pattern exactly.
_BITS_OF = {2: "int16", 4: "int32", 8: "int64"}


def flip_bit(trainer: Any, target: str, tensor: int, index: int, bit: str) -> str:
    """Flip ``bit`` ("sign" or "exponent", the highest exponent bit) of one element of a
    tensor of ``target`` in the trainer's LightningModule; what changed, in words (or why
    nothing did)."""
    named = _tensors(trainer, target)
    if not named:
        return f"nothing flipped: the module has no {target.replace('_', ' ')} tensor yet"
    name, chosen = named[tensor % len(named)]
    return _flip_element(name, chosen, index, bit)


def _tensors(trainer: Any, target: str) -> list[tuple[str, Any]]:
    """The floating-point tensors of the target family, in a fixed order."""
    module = getattr(trainer, "lightning_module", None) if trainer is not None else None
    if module is None:
        return []
    params = list(module.named_parameters())
    if target == "param":
        found = [(name, p.data) for name, p in params]
    elif target == "grad":
        found = [(f"{name}.grad", p.grad) for name, p in params if p.grad is not None]
    else:
        found = _optimizer_state(trainer, {id(p): name for name, p in params})
    return [(name, t) for name, t in found if t.is_floating_point() and t.numel() > 0]


def _optimizer_state(trainer: Any, names: dict[int, str]) -> list[tuple[str, Any]]:
    import torch

    optimizers = getattr(trainer, "optimizers", None) or []
    if not optimizers:
        return []
    optimizer = optimizers[0]
    found = []
    for group in optimizer.param_groups:
        for param in group["params"]:
            for key, value in optimizer.state.get(param, {}).items():
                if isinstance(value, torch.Tensor) and value.dim() > 0:
                    found.append((f"{names.get(id(param), 'param')}[{key}]", value))
    return found


def _flip_element(name: str, tensor: Any, index: int, bit: str) -> str:
    import torch

    width = tensor.element_size()
    if width not in _BITS_OF or not tensor.is_contiguous():
        return f"nothing flipped: {name} is not a contiguous 16, 32 or 64-bit float tensor"
    position = index % tensor.numel()
    shift = width * 8 - (1 if bit == "sign" else 2)  # the sign bit, or the one below it
    with torch.no_grad():
        flat = tensor.view(-1)
        before = float(flat[position])
        as_int = flat[position : position + 1].view(getattr(torch, _BITS_OF[width]))
        mask = torch.ones_like(as_int) << shift  # wraps to the sign bit: the same bits
        as_int.bitwise_xor_(mask)
        after = float(flat[position])
    return f"flipped the {bit} bit of element {position} of {name}: {before:.6g} -> {after:.6g}"
