"""The strategy of each fault kind (``KIND_STRATEGIES``), public as ``chaoslight.strategies``.

Every strategy validates its arguments when it is built, with the same bounds and words
as a World and the CLI (``world_size=0 must be at least 1``), and shrinks towards the
simplest fault: lower ranks, earlier steps, smaller delays and allocations. Each kind's
strategy is entered in ``KIND_STRATEGIES`` by its fault class; where it draws sites and
whether the default search draws it are the class's traits. A whole schedule, the kinds
drawn together and the restarts, is composed in ``_schedule_strategies``.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from hypothesis import strategies as st

from chaoslight._schedule import (
    DRAWN_ORDERS,
    OOM,
    Allocate,
    Corrupt,
    Crash,
    Delay,
    DropSync,
    Fault,
    InvalidArgument,
    Preempt,
    Raise,
    ReorderReduction,
)
from chaoslight._schedule._data_faults import BadCheckpoint, DropBatch, Flip, RepeatBatch
from chaoslight._schedule._faults import FREEZE_HOWS, MAX_DELAY_SECONDS, Freeze, PgAbort
from chaoslight._schedule._validate import (
    BYTES_WHY,
    MAX_BYTES,
    check_bounded_int,
    check_count,
)
from chaoslight._search._caught import PLAIN_ERRORS
from chaoslight._search._data_strategies import (
    bad_checkpoints,
    dropped_batches,
    flips,
    repeated_batches,
)
from chaoslight._search._drawing import kind_faults as _kind
from chaoslight._search._drawing import space_for as _space
from chaoslight._search._minimize import DELAY_GRID
from chaoslight._search._reach import Reach


def delays(
    *,
    world_size: int = 2,
    steps: int = 8,
    sites: Iterable[str] | None = None,
    reach: Reach | None = None,
    max_seconds: float = 3.0,
    resolution: float | None = None,
) -> st.SearchStrategy[Fault]:
    """Stragglers on a grid up to ``max_seconds``: fine near zero (50, 100, 200, 300 ms),
    coarse above (0.5, 1, 2, 3 s), wide enough to beat the natural margins between ranks.

    Shrinks to lower ranks, earlier steps, the first site and the smallest grid point
    that still fails. The grid keeps a shrunk delay a clear step past the threshold that
    made the run fail, so the minimal schedule does not sit on a timing boundary and
    replays the same way. ``resolution`` draws multiples of it instead.
    """
    space = _space(world_size, steps, sites, reach)
    smallest = resolution if resolution is not None else DELAY_GRID[0]
    if not 0.001 <= smallest <= max_seconds <= MAX_DELAY_SECONDS:
        raise InvalidArgument(
            f"max_seconds={max_seconds!r} must be between {smallest!r} and "
            f"{MAX_DELAY_SECONDS:g} seconds"
        )
    if resolution is None:
        grid = [seconds for seconds in DELAY_GRID if seconds <= max_seconds]
    else:
        grid = [round(k * resolution, 6) for k in range(1, round(max_seconds / resolution) + 1)]
    return _kind(space, Delay, seconds=st.sampled_from(grid))


def ooms(
    *,
    world_size: int = 2,
    steps: int = 8,
    sites: Iterable[str] | None = None,
    reach: Reach | None = None,
    deferred: bool | None = False,
) -> st.SearchStrategy[Fault]:
    """Simulated CUDA OOMs, at any site but a collective (``OOM.drawn_at``).

    Shrinks to lower ranks, earlier steps, immediate (not deferred).
    """
    space = _space(world_size, steps, sites, reach)
    flag = st.booleans() if deferred is None else st.just(deferred)
    return _kind(space, OOM, deferred=flag)


def allocations(
    *,
    world_size: int = 2,
    steps: int = 8,
    sites: Iterable[str] | None = None,
    reach: Reach | None = None,
    max_bytes: int = 2**20,
    max_hold_steps: int = 2,
) -> st.SearchStrategy[Fault]:
    """Rank-specific allocations. Shrinks to fewer bytes (1 KiB units) and shorter holds."""
    space = _space(world_size, steps, sites, reach)
    check_bounded_int("max_bytes", max_bytes, 1024, MAX_BYTES, BYTES_WHY)
    check_count("max_hold_steps", max_hold_steps)
    nbytes = st.integers(1, max_bytes // 1024).map(lambda k: k * 1024)
    holds = st.integers(1, max_hold_steps)
    return _kind(space, Allocate, nbytes=nbytes, hold_steps=holds)


def dropped_syncs(
    *,
    world_size: int = 2,
    steps: int = 8,
    sites: Iterable[str] | None = None,
    reach: Reach | None = None,
) -> st.SearchStrategy[Fault]:
    """Skipped barriers/collectives/synchronize on one rank. Shrinks to rank 0, step 0."""
    return _kind(_space(world_size, steps, sites, reach), DropSync)


def reorders(
    *,
    world_size: int = 2,
    steps: int = 8,
    sites: Iterable[str] | None = None,
    reach: Reach | None = None,
    rank_divergent: bool = False,
) -> st.SearchStrategy[Fault]:
    """Reordered reductions, the same order on every rank, as a real backend sums: the
    orders a backend may pick (``DRAWN_ORDERS``). ``compressed`` (bf16 compression) is
    never drawn: it is a configuration the program chooses, not an order.

    Shrinks to the first order ("reversed"), step 0. ``rank_divergent=True`` also draws a
    reorder on one rank only, which hands that rank a different sum: no backend does
    that, so it is a different program, judged as a desync (docs/explanation/oracle.md).
    """
    orders = st.sampled_from(DRAWN_ORDERS)
    space = _space(world_size, steps, sites, reach)
    one_rank = _kind(space, ReorderReduction, order=orders)
    every_rank = one_rank.map(lambda fault: replace(fault, rank=None))
    return st.one_of(every_rank, one_rank) if rank_divergent else every_rank


def raises(
    *,
    world_size: int = 2,
    steps: int = 8,
    sites: Iterable[str] | None = None,
    reach: Reach | None = None,
) -> st.SearchStrategy[Fault]:
    """Raised errors (RuntimeError, then OSError ENOSPC), at any site but a collective;
    with a reach, also the errors the program's handlers catch around each site.

    Shrinks to RuntimeError, rank 0.
    """
    space = _space(world_size, steps, sites, reach)

    def build(**fields: Any) -> Fault:
        name, args = fields.pop("error")
        return Raise(name, args, **fields)

    plain = _kind(space, Raise, build, error=st.sampled_from(PLAIN_ERRORS))
    caught = space.caught_raises()
    return plain if caught is None else st.one_of(plain, caught)


def crashes(
    *,
    world_size: int = 2,
    steps: int = 8,
    sites: Iterable[str] | None = None,
    reach: Reach | None = None,
) -> st.SearchStrategy[Fault]:
    """One rank's death: SIGKILL (a lost node, the OOM killer), or a native crash that
    leaves no Python exception, a segfault (SIGSEGV) or an abort (SIGABRT). Shrinks to
    SIGKILL, rank 0, step 0, the first site."""
    signals = st.sampled_from(CRASH_SIGNALS)
    return _kind(_space(world_size, steps, sites, reach), Crash, signal=signals)


# The deaths a search draws, simplest first: what a shrunk crash is reported as.
CRASH_SIGNALS = tuple(int(getattr(signal, name)) for name in ("SIGKILL", "SIGSEGV", "SIGABRT"))


PREEMPT_AFTER = (0.0, 0.3)  # at the trigger, or a notice that lands mid-step


def preemptions(
    *,
    world_size: int = 2,
    steps: int = 8,
    sites: Iterable[str] | None = None,
    reach: Reach | None = None,
) -> st.SearchStrategy[Fault]:
    """SIGTERM as a scheduler sends it: to every rank at a step, or to one rank (one node
    of a multi-node job); two of them at different steps are a skewed notice.

    ``group=True`` signals the rank's process group too (its DataLoader workers), as
    SLURM does. Shrinks to every rank at once, at the trigger (``after=0``), the rank
    alone (no group), step 0.
    """
    after = st.sampled_from(PREEMPT_AFTER)
    space = _space(world_size, steps, sites, reach)
    one_rank = _kind(space, Preempt, after=after, group=st.booleans())
    every_rank = one_rank.map(lambda fault: replace(fault, rank=None))
    return st.one_of(every_rank, one_rank)


def corruptions(
    *,
    world_size: int = 2,
    steps: int = 8,
    sites: Iterable[str] | None = None,
    reach: Reach | None = None,
) -> st.SearchStrategy[Fault]:
    """NaN/Inf results. Shrinks to NaN, rank 0, step 0."""
    values = st.sampled_from(("nan", "inf"))
    space = _space(world_size, steps, sites, reach)
    return _kind(space, Corrupt, value=values)


# A freeze for good (the peers' timeouts must end the job), or a pause a job rides out.
FREEZE_SECONDS = (None, 0.5)


def freezes(
    *,
    world_size: int = 2,
    steps: int = 8,
    sites: Iterable[str] | None = None,
    reach: Reach | None = None,
) -> st.SearchStrategy[Fault]:
    """A rank frozen while alive, for good or for half a second, by SIGSTOP or by a sleep
    that holds the GIL. Shrinks to for good, SIGSTOP, rank 0, step 0."""
    space = _space(world_size, steps, sites, reach)
    seconds, how = st.sampled_from(FREEZE_SECONDS), st.sampled_from(FREEZE_HOWS)
    return _kind(space, Freeze, seconds=seconds, how=how)


def aborts(
    *,
    world_size: int = 2,
    steps: int = 8,
    sites: Iterable[str] | None = None,
    reach: Reach | None = None,
) -> st.SearchStrategy[Fault]:
    """A rank's process group aborted at a reduction (``PgAbort.drawn_at``). Shrinks to
    rank 0, step 0, the first site."""
    return _kind(_space(world_size, steps, sites, reach), PgAbort)


# Each kind's strategy, by fault class (a new kind adds its own): what one_fault draws for
# each kind it may draw, called with world_size, steps, sites and reach.
Builder = Callable[..., st.SearchStrategy[Fault]]
KIND_STRATEGIES: dict[type[Fault], Builder] = {
    Delay: delays,
    Raise: raises,
    OOM: ooms,
    DropSync: dropped_syncs,
    Crash: crashes,
    Preempt: preemptions,
    Freeze: freezes,
    PgAbort: aborts,
    Allocate: allocations,
    ReorderReduction: reorders,
    Corrupt: corruptions,
    Flip: flips,
    RepeatBatch: repeated_batches,
    DropBatch: dropped_batches,
    BadCheckpoint: bad_checkpoints,
}
