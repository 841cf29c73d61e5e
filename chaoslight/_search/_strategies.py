"""Hypothesis strategies for chaoslight schedules (public as ``chaoslight.strategies``).

    from chaoslight.strategies import schedules

    @given(schedule=schedules(world_size=2, steps=4, mode="fail-cleanly"))
    def test_errors_surface(chaos_world, schedule): ...

Every strategy validates its arguments when it is built (``world_size=0 must be at
least 1``) and shrinks towards the simplest failing schedule: fewer faults, lower
ranks, earlier steps, smaller delays and allocations, and the simpler kind (the order
of ``KINDS`` below, simplest first).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from hypothesis import strategies as st

from chaoslight._schedule import (
    OOM,
    REDUCTION,
    RESULT,
    SITES,
    SYNC,
    Allocate,
    Corrupt,
    Crash,
    Delay,
    DropSync,
    Fault,
    InvalidArgument,
    MemoryBudget,
    Preempt,
    Raise,
    ReorderReduction,
    Schedule,
    suggest,
)
from chaoslight._search._kinds import (  # noqa: F401 - re-exported
    BENIGN_KINDS,
    DEFAULT_KINDS,
    HARD_KINDS,
    IN_PROCESS_KINDS,
    KILLING_KINDS,
    KINDS,
    MODES,
    _resolve_kinds,
)
from chaoslight._search._minimize import DELAY_GRID
from chaoslight._search._reach import OFF_COLLECTIVES, Reach, Space

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


def _check_positive(name: str, value: Any, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidArgument(f"{name}={value!r} must be an int of at least {minimum}")


def _check_sites(sites: Iterable[str] | None) -> tuple[str, ...]:
    chosen = tuple(DEFAULT_SITES if sites is None else sites)
    for site in chosen:
        if site not in SITES:
            raise InvalidArgument(f"sites: {site!r} is not a known site{suggest(site, SITES)}")
    if not chosen:
        raise InvalidArgument("sites=() must name at least one site")
    return chosen


def _kind(
    build: Callable[..., Fault], capability: str | None, **params: st.SearchStrategy[Any]
) -> Callable[[Space], st.SearchStrategy[Fault]]:
    def strategy(space: Space) -> st.SearchStrategy[Fault]:
        trigger = space.triggers(capability)
        return st.builds(lambda t, p: build(**t, **p), trigger, st.fixed_dictionaries(params))

    return strategy


def _space(world_size: int, steps: int, sites: Iterable[str] | None, reach: Reach | None) -> Space:
    _check_positive("world_size", world_size)
    _check_positive("steps", steps)
    chosen = _check_sites(sites if sites is not None or reach is None else reach_sites(reach))
    return Space(world_size, chosen, steps, reach)


def reach_sites(reach: Reach) -> tuple[str, ...]:
    """Every site a run reached, in catalogue order."""
    reached = {site for site, _ in reach.points}
    return tuple(site for site in SITES if site in reached)


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
    if not 0.001 <= smallest <= max_seconds <= 3600:
        raise InvalidArgument(
            f"max_seconds={max_seconds!r} must be between {smallest!r} and 3600 seconds"
        )
    if resolution is None:
        grid = [seconds for seconds in DELAY_GRID if seconds <= max_seconds]
    else:
        grid = [round(k * resolution, 6) for k in range(1, round(max_seconds / resolution) + 1)]
    return _kind(Delay, None, seconds=st.sampled_from(grid))(space)


def ooms(
    *,
    world_size: int = 2,
    steps: int = 8,
    sites: Iterable[str] | None = None,
    reach: Reach | None = None,
    deferred: bool | None = False,
) -> st.SearchStrategy[Fault]:
    """Simulated CUDA OOMs, at any site but a collective (see ``OFF_COLLECTIVES``).

    Shrinks to lower ranks, earlier steps, immediate (not deferred).
    """
    space = _space(world_size, steps, sites, reach)
    flag = st.booleans() if deferred is None else st.just(deferred)
    return _kind(OOM, OFF_COLLECTIVES, deferred=flag)(space)


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
    _check_positive("max_bytes", max_bytes, 1024)
    _check_positive("max_hold_steps", max_hold_steps)
    nbytes = st.integers(1, max_bytes // 1024).map(lambda k: k * 1024)
    holds = st.integers(1, max_hold_steps)
    return _kind(Allocate, None, nbytes=nbytes, hold_steps=holds)(space)


def dropped_syncs(
    *,
    world_size: int = 2,
    steps: int = 8,
    sites: Iterable[str] | None = None,
    reach: Reach | None = None,
) -> st.SearchStrategy[Fault]:
    """Skipped barriers/collectives/synchronize on one rank. Shrinks to rank 0, step 0."""
    return _kind(DropSync, SYNC)(_space(world_size, steps, sites, reach))


def reorders(
    *,
    world_size: int = 2,
    steps: int = 8,
    sites: Iterable[str] | None = None,
    reach: Reach | None = None,
    rank_divergent: bool = False,
) -> st.SearchStrategy[Fault]:
    """Reordered reductions, the same order on every rank, as a real backend sums.

    Shrinks to the first order ("reversed"), step 0. ``rank_divergent=True`` also draws a
    reorder on one rank only, which hands that rank a different sum: no backend does
    that, so it is a different program, judged as a desync (docs/explanation/oracle.md).
    """
    orders = st.sampled_from(("reversed", "tree", "chunked", "premultiplied", "compressed"))
    space = _space(world_size, steps, sites, reach)
    one_rank = _kind(ReorderReduction, REDUCTION, order=orders)(space)
    every_rank = one_rank.map(lambda fault: replace(fault, rank=None))
    return st.one_of(every_rank, one_rank) if rank_divergent else every_rank


def raises(
    *,
    world_size: int = 2,
    steps: int = 8,
    sites: Iterable[str] | None = None,
    reach: Reach | None = None,
) -> st.SearchStrategy[Fault]:
    """Raised errors (RuntimeError, then OSError ENOSPC), at any site but a collective.

    Shrinks to RuntimeError, rank 0.
    """
    kinds = st.sampled_from(
        (
            ("RuntimeError", ("injected by chaoslight",)),
            ("OSError", (28, "No space left on device")),
        )
    )
    space = _space(world_size, steps, sites, reach)

    def build(**fields: Any) -> Fault:
        name, args = fields.pop("error")
        return Raise(name, args, **fields)

    return _kind(build, OFF_COLLECTIVES, error=kinds)(space)


def crashes(
    *,
    world_size: int = 2,
    steps: int = 8,
    sites: Iterable[str] | None = None,
    reach: Reach | None = None,
) -> st.SearchStrategy[Fault]:
    """SIGKILL of one rank. Shrinks to rank 0, step 0, the first site."""
    return _kind(Crash, None)(_space(world_size, steps, sites, reach))


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

    Shrinks to every rank at once, at the trigger (``after=0``), step 0.
    """
    after = st.sampled_from(PREEMPT_AFTER)
    one_rank = _kind(Preempt, None, after=after)(_space(world_size, steps, sites, reach))
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
    return _kind(Corrupt, RESULT, value=values)(space)


_BUILDERS: dict[str, Callable[..., st.SearchStrategy[Fault]]] = {
    "delay": delays,
    "raise": raises,
    "oom": ooms,
    "drop_sync": dropped_syncs,
    "crash": crashes,
    "preempt": preemptions,
    "allocate": allocations,
    "reorder": reorders,
    "corrupt": corruptions,
}
_CAPABILITY = {
    "drop_sync": SYNC,
    "reorder": REDUCTION,
    "corrupt": RESULT,
    "oom": OFF_COLLECTIVES,
    "raise": OFF_COLLECTIVES,
}


def one_fault(
    *,
    world_size: int = 2,
    steps: int = 8,
    sites: Iterable[str] | None = None,
    reach: Reach | None = None,
    faults: Iterable[str] | None = None,
    mode: str | None = None,
    in_process: bool = False,
) -> st.SearchStrategy[Fault]:
    """One fault of any allowed kind. Shrinks to the simplest kind, then as that kind does.

    ``in_process=True`` never draws a crash (it would kill the process running the test).
    """
    space = _space(world_size, steps, sites, reach)
    usable = [
        k for k in _resolve_kinds(faults, mode, in_process) if space.can_take(_CAPABILITY.get(k))
    ]
    if not usable:
        raise InvalidArgument(f"no fault kind can fire at sites={tuple(space.sites)!r}")
    options = {"world_size": world_size, "steps": steps, "sites": space.sites, "reach": reach}
    return st.one_of(*(_BUILDERS[k](**options) for k in usable))


def schedules(
    *,
    world_size: int = 2,
    steps: int = 8,
    sites: Iterable[str] | None = None,
    reach: Reach | None = None,
    faults: Iterable[str] | None = None,
    mode: str | None = None,
    max_faults: int = 3,
    memory_budget: MemoryBudget | None = None,
    in_process: bool = False,
) -> st.SearchStrategy[Schedule]:
    """Schedules of 1..max_faults faults. Shrinks to fewer faults first, then each fault
    to a lower rank, an earlier step, a smaller size and a simpler kind.

    By default it draws every fault a correct program can meet in production (delays,
    raised errors, OOMs, crashes, allocations, reorders on every rank); the oracle
    (``docs/explanation/oracle.md``) judges each run by the faults that fired. ``faults=[...]``
    narrows or widens the kinds (``"drop_sync"``, ``"corrupt"`` are drawn only when
    named). ``reach`` (a run's recorded reach) draws only the (site, step) points that run
    reached, over the whole run, with weight on the user's own hooks; without it, steps
    are ``0..steps-1`` at ``sites``. ``in_process=True`` never draws a crash. With crashes
    or preemptions it also draws one restart (shrinking to none). ``mode`` is a
    deprecated filter of
    kinds: ``"survive"`` keeps delays, reorders and allocations, ``"fail-cleanly"``
    raised errors, OOMs, dropped syncs and crashes.
    """
    _check_positive("max_faults", max_faults)
    one = one_fault(
        world_size=world_size,
        steps=steps,
        sites=sites,
        reach=reach,
        faults=faults,
        mode=mode,
        in_process=in_process,
    )
    # After a crash or a preemption a cluster restarts the job: draw that too.
    killing = not in_process and bool(set(_resolve_kinds(faults, mode)) & set(KILLING_KINDS))
    restarts = st.sampled_from((0, 1)) if killing else st.just(0)
    return st.builds(
        lambda items, again: Schedule(items, memory_budget=memory_budget, restarts=again),
        st.lists(one, min_size=1, max_size=max_faults),
        restarts,
    )
