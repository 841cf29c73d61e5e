"""torch patch points: collectives, cuda.synchronize, save/load, sync points.

Collectives are wrapped both as ``torch.distributed.X`` (how Lightning calls them) and
as the module globals of ``torch.distributed.distributed_c10d`` (how torch's own object
collectives call them: ``broadcast_object_list`` calls the global ``broadcast``).
A ``MemoryBudget`` needs no patch point here: ``_runtime/_dispatch_budget`` sees every
allocation through a torch dispatch mode.
"""

from __future__ import annotations

import io
import os
from typing import Any

from chaoslight._schedule._catalog import COLLECTIVES
from chaoslight._sites import _damage, _reorder
from chaoslight._sites._core import STATE, Behaviour, Call, DroppedWork, PatchPoint, site_wrapper
from chaoslight._sites._tensors import poison, poison_in_place

DIST_OWNERS = ("torch.distributed", "torch.distributed.distributed_c10d")


def _skip_collective(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return DroppedWork() if kwargs.get("async_op") else None


def _poison_collective(
    result: Any, args: tuple[Any, ...], kwargs: dict[str, Any], value: float
) -> Any:
    # Collectives write into their first argument (a tensor, or the output list).
    target = args[0] if args else kwargs.get("tensor", kwargs.get("output"))
    poison_in_place(target, value)
    return result


def _collective_behaviour(name: str) -> Behaviour:
    return Behaviour(
        skip=_skip_collective,
        poison=_poison_collective,
        reduce=_reorder.reorder_all_reduce if name == "all_reduce" else None,
    )


def _half_write(wrapped: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Before torch.save aborts, write half of the serialised bytes, as a crash mid-write does.

    A file named by its path is backed up first and put back when the run ends (see
    ``_damage``); a file object the program opened is the program's own.
    """
    obj = args[0] if args else kwargs.get("obj")
    target = args[1] if len(args) > 1 else kwargs.get("f")
    options = {k: v for k, v in kwargs.items() if k not in ("obj", "f")}
    buffer = io.BytesIO()
    wrapped(obj, buffer, *args[2:], **options)
    data = buffer.getvalue()[: len(buffer.getvalue()) // 2]
    if isinstance(target, (str, os.PathLike)):
        _damage.damage(target, data)
    elif target is not None and hasattr(target, "write"):
        target.write(data)
        if hasattr(target, "flush"):
            target.flush()


def _sync_point(wrapped: Call, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Tensor.item/tolist: where a deferred OOM surfaces on a CPU run."""
    __tracebackhide__ = True
    dispatcher = STATE.dispatcher
    if dispatcher is not None:
        dispatcher.sync_point()
    return wrapped(*args, **kwargs)


def _synced_site_wrapper(site: str, behaviour: Behaviour) -> Any:
    """A site that is also a sync point (cuda.synchronize, barrier)."""
    inner = site_wrapper(site, behaviour)

    def wrapper(wrapped: Call, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        __tracebackhide__ = True
        dispatcher = STATE.dispatcher
        if dispatcher is not None:
            dispatcher.sync_point()
        return inner(wrapped, instance, args, kwargs)

    return wrapper


def _collective_points() -> tuple[PatchPoint, ...]:
    points = []
    for name in COLLECTIVES:
        site = f"dist.{name}"
        behaviour = _collective_behaviour(name)
        wrapper = (
            _synced_site_wrapper(site, behaviour)
            if name == "barrier"
            else site_wrapper(site, behaviour)
        )
        points.append(
            PatchPoint(
                f"torch:{site}",
                DIST_OWNERS,
                name,
                wrapper,
                sites=frozenset({site}),
                sync_point=name == "barrier",
            )
        )
    return tuple(points)


TORCH_POINTS: tuple[PatchPoint, ...] = (
    *_collective_points(),
    PatchPoint(
        "torch:cuda.synchronize",
        ("torch.cuda",),
        "synchronize",
        _synced_site_wrapper("cuda.synchronize", Behaviour(skip=lambda args, kwargs: None)),
        sites=frozenset({"cuda.synchronize"}),
        sync_point=True,
    ),
    PatchPoint(
        "torch:save",
        ("torch",),
        "save",
        site_wrapper("torch.save", Behaviour(before_abort=_half_write)),
        sites=frozenset({"torch.save"}),
    ),
    PatchPoint(
        "torch:load",
        ("torch",),
        "load",
        site_wrapper(
            "torch.load",
            Behaviour(poison=lambda result, args, kwargs, value: poison(result, value)),
        ),
        sites=frozenset({"torch.load"}),
    ),
    PatchPoint("torch:item", ("torch:Tensor",), "item", _sync_point, sync_point=True),
    PatchPoint("torch:tolist", ("torch:Tensor",), "tolist", _sync_point, sync_point=True),
)
