"""Hypothesis strategies for chaoslight schedules (public as ``chaoslight.strategies``).

    from chaoslight.strategies import schedules

    @given(schedule=schedules(world_size=2, steps=4, faults=["raise", "oom"]))
    def test_errors_surface(chaos_world, schedule): ...

Every strategy validates its arguments when it is built, with the same bounds and words
as a World and the CLI (``world_size=0 must be at least 1``), and shrinks towards the
simplest failing schedule: fewer faults, lower ranks, earlier steps, smaller delays and
allocations, and the simpler kind (``KINDS``, simplest first). Each kind's strategy is
entered in ``KIND_STRATEGIES`` by its fault class; where it draws sites and whether the
default search draws it are the class's traits.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from hypothesis import strategies as st

from chaoslight._schedule import (
    DRAWN_ORDERS,
    FAULT_KINDS,
    OOM,
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
)
from chaoslight._schedule._data_faults import BadCheckpoint, DropBatch, Flip, RepeatBatch
from chaoslight._schedule._faults import FREEZE_HOWS, MAX_DELAY_SECONDS, Freeze, PgAbort
from chaoslight._schedule._validate import (
    BYTES_WHY,
    FAULTS_WHY,
    MAX_BYTES,
    MAX_FAULTS,
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
from chaoslight._search._kinds import resolve_kinds
from chaoslight._search._minimize import DELAY_GRID
from chaoslight._search._reach import Reach
from chaoslight._search._recovery import bind_to_second_run, can_draw_at, resume_sites


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


def one_fault(
    *,
    world_size: int = 2,
    steps: int = 8,
    sites: Iterable[str] | None = None,
    reach: Reach | None = None,
    faults: Iterable[str] | None = None,
    in_process: bool = False,
) -> st.SearchStrategy[Fault]:
    """One fault of any allowed kind. Shrinks to the simplest kind, then as that kind does.

    ``in_process=True`` never draws a crash (it would kill the process running the test).
    """
    space = _space(world_size, steps, sites, reach)
    kinds = [FAULT_KINDS[k] for k in resolve_kinds(faults, in_process)]
    usable = [cls for cls in kinds if space.can_take(cls.drawn_at)]
    if not usable:
        raise InvalidArgument(f"no fault kind can fire at sites={tuple(space.sites)!r}")
    options = {"world_size": world_size, "steps": steps, "sites": space.sites, "reach": reach}
    return st.one_of(*(KIND_STRATEGIES[cls](**options) for cls in usable))


def schedules(
    *,
    world_size: int = 2,
    steps: int = 8,
    sites: Iterable[str] | None = None,
    reach: Reach | None = None,
    faults: Iterable[str] | None = None,
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
    or preemptions it also draws one restart (shrinking to none), and with a restart some
    faults bound to run 2 (``run=2``, shrinking to unbound): the job fails again while it
    resumes. With a ``reach`` these include the sites only a resumed run reaches
    (the checkpoint read back: ``_recovery.RESUME_SITES``), at no step.
    """
    check_bounded_int("max_faults", max_faults, 1, MAX_FAULTS, FAULTS_WHY)
    one = one_fault(
        world_size=world_size,
        steps=steps,
        sites=sites,
        reach=reach,
        faults=faults,
        in_process=in_process,
    )
    # After a crash or a preemption a cluster restarts the job: draw that too.
    kinds = resolve_kinds(faults, in_process)
    killing = not in_process and any(FAULT_KINDS[k].kills_process for k in kinds)
    drawn = st.lists(one, min_size=1, max_size=max_faults)
    if not killing:
        return drawn.map(lambda items: Schedule(items, memory_budget=memory_budget))
    # With a restart, a fault may strike again while the job resumes: some drawn faults
    # bound to run 2 (one in four; shrinking to none), and, where a baseline's reach says
    # where runs go, one at a site only a resumed run reaches (the baseline never loads a
    # checkpoint), bound to run 2 and to no step: whenever the resume reaches it.
    at_resume = resume_sites(sites, reach)
    resume = (
        st.lists(
            one_fault(world_size=world_size, steps=steps, sites=at_resume, faults=faults).map(
                lambda f: replace(f, step=None, run=2)
            ),
            max_size=1,
        )
        if at_resume and can_draw_at(at_resume, kinds)
        else st.just([])
    )

    def build(items: list[Fault], again: int, bind: list[int], extra: list[Fault]) -> Schedule:
        if again:
            items = bind_to_second_run(items, bind, memory_budget)
            items += extra[: max_faults - len(items)]
        return Schedule(items, memory_budget=memory_budget, restarts=again)

    return st.builds(
        build,
        drawn,
        st.sampled_from((0, 1)),
        st.lists(st.integers(0, 3), min_size=max_faults, max_size=max_faults),
        resume,
    )
