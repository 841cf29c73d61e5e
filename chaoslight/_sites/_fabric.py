"""Lightning Fabric patch points, for both ``lightning.fabric`` and ``lightning_fabric``.

A Fabric program writes its own loop; what it calls of Fabric are public methods of
``Fabric`` (launch, setup, backward, save, load and the collectives) and the two wrappers
``setup`` hands back: ``_FabricModule`` (whose ``forward`` is the model call inside the
loop) and ``_FabricOptimizer`` (whose ``step`` the loop calls). Each is one site. Steps
are the loop's (``_loop``): Fabric's optimizer step ends in torch's optimizer step.
"""

from __future__ import annotations

from typing import Any

from chaoslight._schedule._catalog import FABRIC_CALLS
from chaoslight._sites._core import Behaviour, Gating, PatchPoint, site_wrapper
from chaoslight._sites._loop import loop_site, loop_step
from chaoslight._sites._patch import Wrapper
from chaoslight._sites._tensors import poison

NAMESPACES = ("lightning.fabric", "lightning_fabric")

# Where each call is defined, under the namespace.
OWNERS = {"forward": "wrappers:_FabricModule", "optimizer_step": "wrappers:_FabricOptimizer"}
ATTRIBUTES = {"optimizer_step": "step"}


def _argument(args: tuple[Any, ...], kwargs: dict[str, Any], name: str) -> Any:
    """The first argument of a bound method, by position or by ``name``."""
    return args[0] if args else kwargs.get(name)


def _poison(result: Any, args: tuple[Any, ...], kwargs: dict[str, Any], value: float) -> Any:
    return poison(result, value)


BEHAVIOURS = {
    # A rank that skips a collective keeps what it had: its own tensor, its own object.
    "barrier": Behaviour(skip=lambda args, kwargs: None),
    "all_reduce": Behaviour(
        skip=lambda args, kwargs: _argument(args, kwargs, "data"), poison=_poison
    ),
    "broadcast": Behaviour(skip=lambda args, kwargs: _argument(args, kwargs, "obj")),
    "all_gather": Behaviour(poison=_poison),
    "forward": Behaviour(poison=_poison, step_of=loop_step),
}


# The calls of a training step: before the loop's first backward they belong to step 0
# (``_loop.loop_step``). The rest (setup, collectives, save and load) have the step of the
# moment they run, None before training, as every other site.
IN_LOOP = frozenset({"backward", "optimizer_step"})
_IN_LOOP = Behaviour(step_of=loop_step)
_SETUP = Behaviour()


def _wrapper(name: str, site: str) -> Wrapper:
    behaviour = BEHAVIOURS.get(name, _IN_LOOP if name in IN_LOOP else _SETUP)
    if name == "forward":  # the model's call begins the loop's next step (``_loop``)
        return loop_site(site, behaviour, moves=True)
    return site_wrapper(site, behaviour)


def _points() -> tuple[PatchPoint, ...]:
    points = []
    for name in FABRIC_CALLS:
        owner = OWNERS.get(name, "fabric:Fabric")
        module, _, qualname = owner.partition(":")
        site = f"fabric.{name}"
        points.append(
            PatchPoint(
                site.replace(".", ":", 1),
                tuple(f"{space}.{module}:{qualname}" for space in NAMESPACES),
                ATTRIBUTES.get(name, name),
                _wrapper(name, site),
                sites=frozenset({site}),
                # The model's call moves a loop's step (``_wrapper``).
                gating=Gating.LOOP_CLOCK if name == "forward" else Gating.SITE,
            )
        )
    return tuple(points)


FABRIC_POINTS: tuple[PatchPoint, ...] = _points()
