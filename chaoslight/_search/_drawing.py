"""What every kind's strategy shares: the space it draws in (ranks, sites, steps or a
run's reach) and the faults of one kind drawn there (``_strategies``, ``_data_strategies``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from hypothesis import strategies as st

from chaoslight._schedule import SITES, Fault
from chaoslight._schedule._validate import (
    MAX_STEPS,
    STEPS_WHY,
    check_bounded_int,
    check_sites,
    check_world_size,
)
from chaoslight._search._reach import Reach, Space

# Sites most training code reaches; a search over all ~70 hook sites mostly misses.
DEFAULT_SITES = (
    "lightning.training_step",
    "lightning.forward",
    "lightning.backward",
    "lightning.optimizer_step",
    "lightning.validation_step",
    "lightning.on_train_batch_end",
    "lightning.on_train_epoch_end",
    "lightning.on_validation_epoch_end",
    "dist.all_reduce",
    "dist.broadcast",
    "dist.barrier",
    "dist.gradient_allreduce",
)


def kind_faults(
    space: Space,
    kind: type[Fault],
    build: Callable[..., Fault] | None = None,
    **params: st.SearchStrategy[Any],
) -> st.SearchStrategy[Fault]:
    """``kind`` faults (made by ``build``, else the class) at the sites its ``drawn_at``
    capability allows in ``space``, with ``params`` drawn from their strategies."""
    make = build or kind
    trigger = space.triggers(kind.drawn_at)
    return st.builds(lambda t, p: make(**t, **p), trigger, st.fixed_dictionaries(params))


def space_for(
    world_size: int,
    steps: int,
    sites: Iterable[str] | None,
    reach: Reach | None,
    default_sites: Iterable[str] = DEFAULT_SITES,
) -> Space:
    """The space a kind draws in: ``sites`` as given, else every site the reach reached,
    else ``default_sites``, validated as every strategy validates its arguments."""
    check_world_size("world_size", world_size)
    check_bounded_int("steps", steps, 1, MAX_STEPS, STEPS_WHY)
    if sites is None:
        sites = default_sites if reach is None else reach_sites(reach)
    return Space(world_size, check_sites("sites", sites), steps, reach)


def reach_sites(reach: Reach) -> tuple[str, ...]:
    """Every site a run reached, in catalogue order."""
    reached = {site for site, _ in reach.points}
    return tuple(site for site in SITES if site in reached)
