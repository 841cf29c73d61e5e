"""chaoslight.strategies: valid schedules, argument errors, and how they shrink."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings

import chaoslight
from chaoslight import InvalidArgument, Schedule
from chaoslight._schedule._catalog import SITES
from chaoslight._search._minimize import drop_redundant_faults
from chaoslight.strategies import (
    allocations,
    delays,
    dropped_syncs,
    one_fault,
    reorders,
    schedules,
)

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(schedule=schedules(world_size=3, steps=5, max_faults=4))
def test_generated_schedules_are_valid_and_round_trip(schedule: Schedule) -> None:
    """Every drawn schedule stays inside its bounds and survives the JSON and text forms."""
    assert 1 <= len(schedule) <= 4
    for fault in schedule:
        if fault.kind == "reorder":
            assert fault.rank is None  # every rank sums in the same order, as backends do
        elif fault.kind == "preempt":
            assert fault.rank is None or 0 <= fault.rank < 3  # a whole job, or one node
        else:
            assert fault.rank is not None and 0 <= fault.rank < 3
        assert fault.step is not None and 0 <= fault.step < 5
        assert fault.site in SITES
    assert schedule.restarts in (0, 1)
    assert Schedule.from_json(schedule.to_json()) == schedule
    assert Schedule.from_text(schedule.to_text()) == schedule


@FAST
@given(schedule=schedules(world_size=3))
def test_default_search_draws_only_faults_of_production(schedule: Schedule) -> None:
    """By default no dropped sync, no corruption, no dropped batch, and reorders only on
    every rank at once: the faults a production job meets."""
    production = {"delay", "raise", "oom", "crash", "preempt", "allocate", "reorder"}
    production |= {"freeze", "pg_abort", "flip", "repeat_batch", "bad_checkpoint"}
    assert {f.kind for f in schedule} <= production
    assert all(f.rank is None for f in schedule if f.kind == "reorder")


@FAST
@given(schedule=schedules(world_size=2, sites=["dist.broadcast", "dist.all_reduce", "torch.save"]))
def test_errors_are_never_drawn_inside_collectives(schedule: Schedule) -> None:
    """Raised errors and OOMs go anywhere but a collective (Lightning swallows one raised by
    its own per-batch broadcast: every correct program would hang)."""
    for fault in schedule:
        if fault.kind in ("raise", "oom"):
            assert not fault.site.startswith("dist."), fault


@FAST
@given(schedule=schedules(in_process=True))
def test_in_process_search_never_draws_a_crash(schedule: Schedule) -> None:
    """in_process=True never draws a crash: it would kill the process running the test."""
    assert all(f.kind != "crash" for f in schedule)


def test_in_process_search_refuses_crash_by_name() -> None:
    """Asking an in-process search for crashes is a one-line error that names the World."""
    with pytest.raises(InvalidArgument, match=r"would kill this process.*World"):
        schedules(faults=["crash"], in_process=True)


def test_a_search_draws_every_backend_order_and_never_compressed() -> None:
    """Reorders are drawn among a backend's own orders only: bf16 compression is a
    configuration the program chooses, so ``order=compressed`` is never drawn."""
    seen: set[str] = set()

    @settings(max_examples=300, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(schedule=schedules(world_size=3, sites=["dist.all_reduce"], faults=["reorder"]))
    def draw(schedule: Schedule) -> None:
        seen.update(fault.order for fault in schedule)  # type: ignore[attr-defined]

    draw()
    assert seen == {"reversed", "tree", "chunked", "premultiplied"}


def test_schedules_refuse_a_world_a_world_refuses() -> None:
    """``schedules(world_size=100)`` is refused with the words ``World(size=100)`` uses."""
    with pytest.raises(InvalidArgument) as world:
        chaoslight.World(size=100)
    with pytest.raises(InvalidArgument) as strategy:
        schedules(world_size=100)
    assert str(strategy.value) == "world_" + str(world.value)
    assert str(strategy.value) == (
        "world_size=100 must be at most 64 (each rank is a process on this machine)"
    )


@FAST
@given(fault=dropped_syncs(sites=["lightning.training_step", "dist.barrier", "dist.all_reduce"]))
def test_kind_strategies_respect_site_capabilities(fault: object) -> None:
    """DropSync is only drawn at sync sites, even when other sites are allowed."""
    assert getattr(fault, "site", None) in ("dist.barrier", "dist.all_reduce")


def shrink(strategy: object, fails: Callable[[Schedule], bool]) -> Schedule:
    """Hypothesis's shrink (no explain phase), then chaoslight's deletion pass, as the
    fuzzer does."""
    quick = settings(database=None, max_examples=5000, phases=(Phase.generate, Phase.shrink))
    found = find(strategy, fails, settings=quick)  # type: ignore[arg-type]
    return drop_redundant_faults(found, fails)


@pytest.mark.parametrize("attempt", range(3))
def test_schedules_shrink_to_one_fault_lowest_rank_earliest_step(attempt: int) -> None:
    """A failure that needs any crash shrinks to one crash at rank 0, step 0, the first site."""
    minimal = shrink(schedules(world_size=4, steps=8), lambda s: any(f.kind == "crash" for f in s))
    assert minimal.to_text() == "crash@lightning.training_step rank=0 step=0"


@pytest.mark.slow
@pytest.mark.parametrize("attempt", range(3))
def test_two_fault_failure_shrinks_to_exactly_those_two(attempt: int) -> None:
    """A failure needing a delay on rank 1 and an OOM at step 2 shrinks to just those two."""

    def fails(s: Schedule) -> bool:
        return any(f.kind == "delay" and f.rank == 1 for f in s) and any(
            f.kind == "oom" and f.step == 2 for f in s
        )

    minimal = shrink(schedules(world_size=2, steps=4, max_faults=5), fails)
    assert sorted(minimal.to_text().splitlines()) == [
        "delay@lightning.training_step rank=1 step=0 seconds=0.05",
        "oom@lightning.training_step rank=0 step=2",
    ]


def test_delays_shrink_to_the_smallest_failing_grid_step() -> None:
    """Delays shrink to the smallest grid point that still fails: 0.3 s for a 0.25 s bound."""
    minimal = find(delays(max_seconds=3.0), lambda f: f.seconds >= 0.25)  # type: ignore[attr-defined]
    assert minimal.seconds == 0.3  # type: ignore[attr-defined]


def test_delays_with_a_resolution_shrink_to_its_smallest_failing_multiple() -> None:
    """With a resolution, delays are its multiples and shrink to the smallest that fails."""
    minimal = find(delays(max_seconds=2.0, resolution=0.05), lambda f: f.seconds >= 0.25)  # type: ignore[attr-defined]
    assert minimal.seconds == 0.25  # type: ignore[attr-defined]


def test_allocations_shrink_to_smallest_size() -> None:
    """Allocations shrink to the smallest size (in KiB) that still fails."""
    minimal = find(allocations(max_bytes=2**20), lambda f: f.nbytes > 4096)  # type: ignore[attr-defined]
    assert minimal.nbytes == 5 * 1024  # type: ignore[attr-defined]


def test_reorders_only_at_reduction_sites() -> None:
    """Reorders are drawn only at reduction sites."""
    fault = find(reorders(), lambda f: True)
    assert "reduction" in SITES[fault.site].capabilities


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: schedules(world_size=0), "world_size=0 must be at least 1"),
        (lambda: schedules(steps=10**7), "steps=10000000 must be at most"),
        (lambda: schedules(max_faults=65), "max_faults=65 must be at most 64"),
        (lambda: allocations(max_bytes=100), "max_bytes=100 must be at least 1024"),
        (lambda: schedules(steps=-1), "steps=-1"),
        (lambda: schedules(max_faults=0), "max_faults=0"),
        (lambda: schedules(sites=["lightning.trainng_step"]), "did you mean"),
        (lambda: schedules(sites=[]), "at least one site"),
        (lambda: schedules(faults=["oomm"]), "'oomm' is not a fault kind"),
        (lambda: schedules(faults="oom"), "must be a list of fault kinds"),
        (lambda: one_fault(sites=["torch.save"], faults=["drop_sync"]), "no fault kind"),
        (lambda: delays(max_seconds=0), "max_seconds=0"),
        (lambda: delays(max_seconds=1, resolution=2), "between 2"),
    ],
)
def test_bad_arguments_fail_when_built(build: object, message: str) -> None:
    """Bad strategy arguments raise InvalidArgument naming the argument, at build time."""
    with pytest.raises(InvalidArgument, match=message.replace("(", r"\(")) as info:
        build()  # type: ignore[operator]
    assert "\n" not in str(info.value)


def test_deletion_pass_keeps_only_needed_faults() -> None:
    """The deletion pass removes every fault the failure does not need, keeping order."""
    schedule = Schedule.parse(
        "delay@lightning.training_step rank=0 step=0\n"
        "crash@lightning.forward rank=1 step=2\n"
        "oom@lightning.backward rank=0 step=1\n"
        "raise@dist.barrier rank=1 step=3\n"
    )
    minimal = drop_redundant_faults(schedule, lambda s: {f.kind for f in s} >= {"crash", "raise"})
    assert [f.kind for f in minimal] == ["crash", "raise"]
