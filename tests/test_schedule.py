"""Schedules and triggers: what a schedule accepts, and exactly which calls a trigger fires on."""

from __future__ import annotations

import dataclasses
import io
from typing import Any

import pytest
import torch
from helpers import SKIPPED_BATCH, fit, tiny_model

import chaoslight
from chaoslight import OOM, Delay, DropSync, MemoryBudget, Raise, Schedule

# Ranks are read from $RANK and friends: none set, unless a test sets one.
pytestmark = pytest.mark.usefixtures("rank_env", "lightning_in_process")


class DiskFull(OSError):
    """A user's own exception class, importable as ``<this module>:DiskFull``."""


def fired(run: chaoslight.Run, site: str) -> list[tuple[int | None, int]]:
    """(step, call #) of every firing at ``site``."""
    return [(e.step, e.call) for e in run.fired(site)]


def test_empty_schedule_fires_nothing_and_changes_no_result() -> None:
    """inject(Schedule()) around fit records no event and trains bit-for-bit like a plain fit."""
    plain = fit(max_steps=4)
    with chaoslight.inject(Schedule()) as run:
        injected = fit(max_steps=4)
    assert run.events == []
    assert not run.reached
    assert torch.equal(plain.flat_params(), injected.flat_params())
    assert [float(v) for _, v in plain.losses] == [float(v) for _, v in injected.losses]


def test_schedule_accepts_one_fault_an_iterable_or_text() -> None:
    """A Schedule takes a fault or any iterable; inject() also takes text, JSON or None."""
    fault = OOM(site="lightning.training_step", rank=1, step=3)
    schedule = Schedule([fault])
    assert Schedule(fault) == schedule
    assert Schedule(f for f in [fault]) == schedule
    assert len(schedule) == 1 and list(schedule) == [fault] and schedule
    assert schedule.sites == frozenset({"lightning.training_step"})
    for form in (schedule, fault, [fault], str(schedule), schedule.to_json()):
        assert chaoslight.inject(form).schedule == schedule
    assert chaoslight.inject().schedule == Schedule()
    assert Schedule(memory_budget=MemoryBudget(10))  # a budget alone is not empty


def test_schedules_and_faults_are_immutable() -> None:
    """Faults, budgets and schedules are frozen: a schedule cannot change after validation."""
    fault = Delay(0.5, site="torch.save")
    schedule = Schedule([fault], memory_budget=MemoryBudget(10))
    with pytest.raises(dataclasses.FrozenInstanceError):
        fault.seconds = -1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        schedule.faults = ()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        schedule.memory_budget.limit_bytes = 0  # type: ignore[union-attr]


def test_raise_accepts_instance_class_or_name() -> None:
    """Raise stores an exception instance, class or name as the same name plus args."""
    assert Raise(OSError(28, "full"), site="torch.save") == Raise(
        "OSError", args=(28, "full"), site="torch.save"
    )
    assert Raise(OSError, site="torch.save").exception == "OSError"
    assert Raise(DiskFull, site="torch.save").exception == f"{DiskFull.__module__}:DiskFull"
    assert Raise(torch.OutOfMemoryError, site="torch.save").exception == "torch:OutOfMemoryError"


def test_raise_of_a_user_exception_class_raises_that_class() -> None:
    """A Raise of a non-builtin class raises an instance of that very class with its args."""
    with (
        chaoslight.inject(Raise(DiskFull(28, "disk full"), site="torch.save")) as run,
        pytest.raises(DiskFull) as caught,
    ):
        torch.save({"x": 1}, io.BytesIO())
    assert caught.value.args == (28, "disk full")
    assert caught.value.errno == 28
    assert fired(run, "torch.save") == [(None, 1)]


def test_catalogues_list_every_site_and_kind() -> None:
    """sites() and faults() name every site and kind, each with a one-line description."""
    from chaoslight._schedule._catalog import SITES
    from chaoslight._schedule._faults import FAULT_KINDS
    from chaoslight._sites import implemented_sites

    assert set(chaoslight.sites()) == set(SITES)
    assert set(chaoslight.faults()) == set(FAULT_KINDS)
    for description in [*chaoslight.sites().values(), *chaoslight.faults().values()]:
        assert description and "\n" not in description
    assert implemented_sites() == frozenset(SITES)


# -- triggers in a real fit: six training steps, one training_step call per step ----------

ALL_STEPS = [(step, step + 1) for step in range(6)]


@pytest.mark.parametrize(
    ("trigger", "expected", "watched"),
    [
        ({}, [(0, 1)], False),
        ({"nth": 2}, [(1, 2)], False),
        ({"nth": 2, "times": None}, ALL_STEPS[1:], True),
        ({"nth": 5, "times": 3}, ALL_STEPS[4:], True),
        ({"times": None}, ALL_STEPS, True),
        ({"times": 2}, ALL_STEPS[:2], False),
        ({"step": 3}, [(3, 1)], False),  # a fault at a step counts its calls within it
        ({"step": 3, "times": None}, [(3, 1)], False),
        ({"step": 3, "nth": 2}, [], False),
        ({"step": 99}, [], False),
        ({"rank": 0, "times": None}, ALL_STEPS, True),
        # No process group: the rank is not known for sure, the site stays watched.
        ({"rank": 1, "times": None}, [], True),
        ({"rank": 1, "step": 2}, [], False),
    ],
    ids=lambda value: repr(value) if isinstance(value, dict) else None,
)
def test_trigger_fires_on_exactly_the_matching_calls(
    rank_env: pytest.MonkeyPatch,
    trigger: dict[str, Any],
    expected: list[tuple[int, int]],
    watched: bool,
) -> None:
    """nth, times, step and rank select exactly these (step, call #) training_step calls.
    A site where the fault can fire at every step is watched, every call counted; once it
    cannot (spent, or at another step), its calls pass uncounted and the report says so."""
    with chaoslight.inject(Delay(0, site="lightning.training_step", **trigger)) as run:
        fit(max_steps=6)
    assert fired(run, "lightning.training_step") == expected
    assert all(e.rank == 0 for e in run.events)
    assert ("lightning.training_step" not in run.unwatched) == watched
    if watched:
        assert run.reached[("lightning.training_step", 0)] == 6
    else:
        assert "not counted where none of their faults could fire" in run.report()


@pytest.mark.parametrize("rank", ["0", "1", "3"])
@pytest.mark.filterwarnings(SKIPPED_BATCH)
def test_rank_filter_reads_the_launcher_rank(rank_env: pytest.MonkeyPatch, rank: str) -> None:
    """Without a process group the rank is $RANK: a rank=1 fault fires only in rank 1."""
    rank_env.setenv("RANK", rank)
    with chaoslight.inject(OOM(site="lightning.forward", rank=1, step=2)) as run:
        model = tiny_model(catch_forward=True)
        fit(model, max_steps=4)
    if rank == "1":
        assert [(e.rank, e.step) for e in run.fired()] == [(1, 2)]
        assert [step for step, _ in model.caught] == [2]
        assert "GPU 1 " in model.caught[0][1]
    else:
        assert run.fired() == []
        assert model.caught == []
    assert {rank_ for _, rank_ in run.reached} == {int(rank)}


def test_nth_counts_within_the_step_when_a_step_is_given() -> None:
    """With step=N, nth=k fires on the k-th call of the site within step N only."""

    def two_more_forwards(model: Any, step: int) -> None:
        x = torch.zeros(1, 4)
        model(x)
        model(x)

    model = tiny_model(step_hook=two_more_forwards)  # three forward calls per step
    faults = [
        Delay(0, site="lightning.forward", step=2, nth=2, times=None),
        Delay(0, site="lightning.forward", nth=2),
    ]
    with chaoslight.inject(faults) as run:
        fit(model, max_steps=4)
    by_fault = {}
    for event in run.fired():
        by_fault.setdefault(event.fault, []).append((event.step, event.call))
    assert by_fault == {
        str(faults[0]): [(2, 2), (2, 3)],  # the 2nd and 3rd calls of step 2
        str(faults[1]): [(0, 2)],  # the 2nd call since injection began
    }
    # Watched while a fault could fire: step 0 up to the firing, then step 2 (3 calls).
    assert "lightning.forward" in run.unwatched
    assert run.reached[("lightning.forward", 0)] == 2 + 3


def test_times_counts_per_fault_not_per_site() -> None:
    """Two faults at one site keep separate firing counts; both fire on one call if they match."""
    faults = [DropSync(site="cuda.synchronize", times=2), Delay(0, site="cuda.synchronize")]
    with chaoslight.inject(faults) as run:
        assert torch.cuda.synchronize() is None
        assert torch.cuda.synchronize() is None
    assert [(e.fault, e.call) for e in run.fired()] == [
        (str(faults[0]), 1),
        (str(faults[1]), 1),
        (str(faults[0]), 2),
    ]
