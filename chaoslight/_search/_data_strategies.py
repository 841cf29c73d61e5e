"""Strategies of the kinds that damage data (``_schedule/_data_faults``): a flipped bit, a
batch read twice or lost, a checkpoint that reads back damaged. Entered in
``_strategies.KIND_STRATEGIES``; each is called with ``world_size``, ``steps``, ``sites``
and ``reach`` and draws at the sites its kind's ``drawn_at`` allows in that space.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hypothesis import strategies as st

from chaoslight._schedule import Fault
from chaoslight._schedule._data_faults import (
    CHECKPOINT_EFFECTS,
    FLIP_BITS,
    FLIP_TARGETS,
    BadCheckpoint,
    DropBatch,
    Flip,
    RepeatBatch,
)
from chaoslight._search._drawing import kind_faults, reach_sites, space_for
from chaoslight._search._reach import Reach

# Where a search draws a flip without a reach: where a gradient is reduced and about to be
# used, and where a parameter feeds the next forward.
FLIP_SITES = (
    "lightning.on_before_optimizer_step",
    "lightning.training_step",
    "lightning.on_train_batch_end",
)
# Which tensor of the family, and which element: small ranges, shrinking to the first.
FLIP_TENSORS = 8
FLIP_ELEMENTS = 1024


def _drawn(
    kind: type[Fault],
    world_size: int,
    steps: int,
    sites: Iterable[str] | None,
    reach: Reach | None,
    default_sites: Iterable[str],
    **params: st.SearchStrategy[Any],
) -> st.SearchStrategy[Fault]:
    """``kind`` faults at the sites its ``drawn_at`` capability allows (``default_sites``
    when neither sites nor a reach are given), with ``params`` drawn from their strategies."""
    if sites is None and reach is not None:
        sites = reach_sites(reach) or tuple(default_sites)
    space = space_for(world_size, steps, sites, reach, default_sites)
    return kind_faults(space, kind, None, **params)


def flips(
    *,
    world_size: int = 2,
    steps: int = 8,
    sites: Iterable[str] | None = None,
    reach: Reach | None = None,
) -> st.SearchStrategy[Fault]:
    """One bit flipped in one element of a parameter, gradient or optimizer state on one
    rank (silent data corruption). Shrinks to a parameter, its first tensor and element,
    the exponent bit, rank 0, the earliest step."""
    return _drawn(
        Flip,
        world_size,
        steps,
        sites,
        reach,
        FLIP_SITES,
        target=st.sampled_from(FLIP_TARGETS),
        tensor=st.integers(0, FLIP_TENSORS - 1),
        index=st.integers(0, FLIP_ELEMENTS - 1),
        bit=st.sampled_from(FLIP_BITS),
    )


def repeated_batches(
    *,
    world_size: int = 2,
    steps: int = 8,
    sites: Iterable[str] | None = None,
    reach: Reach | None = None,
) -> st.SearchStrategy[Fault]:
    """A batch read twice on one rank (the next one lost). Shrinks to rank 0, step 0."""
    return _drawn(RepeatBatch, world_size, steps, sites, reach, ("lightning.next_batch",))


def dropped_batches(
    *,
    world_size: int = 2,
    steps: int = 8,
    sites: Iterable[str] | None = None,
    reach: Reach | None = None,
) -> st.SearchStrategy[Fault]:
    """A batch lost on one rank (its epoch one batch shorter). Shrinks to rank 0, step 0."""
    return _drawn(DropBatch, world_size, steps, sites, reach, ("lightning.next_batch",))


def bad_checkpoints(
    *,
    world_size: int = 2,
    steps: int = 8,
    sites: Iterable[str] | None = None,
    reach: Reach | None = None,
) -> st.SearchStrategy[Fault]:
    """A checkpoint load on one rank that reads a truncated, empty or missing file, at the
    load sites a run reached. Shrinks to truncated, rank 0, the earliest step."""
    loads = ("lightning.load_checkpoint", "torch.load")
    effects = st.sampled_from(CHECKPOINT_EFFECTS)
    return _drawn(BadCheckpoint, world_size, steps, sites, reach, loads, effect=effects)
