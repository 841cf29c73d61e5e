"""Schedules as a search draws them (public as ``chaoslight.strategies``): one fault of any
allowed kind, and schedules of several, with a restart and faults that strike again while
the job resumes.

    from chaoslight.strategies import schedules

    @given(schedule=schedules(world_size=2, steps=4, faults=["raise", "oom"]))
    def test_errors_surface(chaos_world, schedule): ...

Each kind is drawn by its own strategy (``_strategies.KIND_STRATEGIES``); a schedule
shrinks to fewer faults first, then each fault as its kind shrinks, and to the simpler
kind (``KINDS``, simplest first).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from hypothesis import strategies as st

from chaoslight._schedule import FAULT_KINDS, Fault, InvalidArgument, MemoryBudget, Schedule
from chaoslight._schedule._validate import FAULTS_WHY, MAX_FAULTS, check_bounded_int
from chaoslight._search._drawing import space_for
from chaoslight._search._kinds import resolve_kinds
from chaoslight._search._reach import Reach
from chaoslight._search._recovery import bind_to_second_run, can_draw_at, resume_sites
from chaoslight._search._strategies import KIND_STRATEGIES


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
    space = space_for(world_size, steps, sites, reach)
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
