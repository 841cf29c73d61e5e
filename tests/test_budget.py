"""Allocate and MemoryBudget: simulated device memory that runs out on a CPU machine."""

from __future__ import annotations

import io
from typing import Any

import pytest
import torch
from helpers import fit, tiny_model

import chaoslight
from chaoslight import Allocate, MemoryBudget, Schedule

# Ranks are read from $RANK and friends: none set, unless a test sets one.
pytestmark = pytest.mark.usefixtures("rank_env")

MiB = 2**20
OOM_PREFIX = "CUDA out of memory. Tried to allocate"


def allocating(nbytes: int) -> tuple[Any, dict[int, str]]:
    """A step_hook that makes a ``nbytes`` torch.randn each step; and its per-step outcome."""
    outcome: dict[int, str] = {}

    def hook(model: Any, step: int) -> None:
        try:
            block = torch.randn(nbytes // 4)
        except torch.OutOfMemoryError as exc:
            outcome[step] = str(exc)
        else:
            outcome[step] = "ok"
            del block

    return hook, outcome


def test_allocate_holds_memory_for_hold_steps_then_releases_it() -> None:
    """Allocate(hold_steps=2) at step 1 fills the budget during steps 1-2, and frees it at 3."""
    hook, outcome = allocating(2 * MiB)
    fault = Allocate(site="lightning.training_step", step=1, nbytes=3 * MiB, hold_steps=2)
    schedule = Schedule([fault], memory_budget=MemoryBudget(4 * MiB))
    with chaoslight.inject(schedule) as run:
        fit(tiny_model(step_hook=hook), max_steps=5)
    assert [step for step, text in outcome.items() if text != "ok"] == [1, 2]
    assert outcome[1].startswith(f"{OOM_PREFIX} 2.00 MiB. GPU 0 has a total capacity of 4.00 MiB")
    assert [(e.kind, e.step) for e in run.events] == [("fired", 1), ("released", 3)]
    assert run.events[1].fault == str(fault)
    assert run.events[1].detail == f"{3 * MiB} bytes"


def test_allocate_without_a_budget_fires_and_releases() -> None:
    """Without a budget an Allocate still fires and is released hold_steps later."""
    fault = Allocate(site="lightning.training_step", step=0, nbytes=MiB, hold_steps=3)
    with chaoslight.inject(fault) as run:
        fit(max_steps=5)
    assert [(e.kind, e.step) for e in run.events] == [("fired", 0), ("released", 3)]


def test_allocate_held_until_the_end_is_released_on_exit() -> None:
    """hold_steps=None keeps the memory until the inject block ends, with no release event."""
    hook, outcome = allocating(2 * MiB)
    fault = Allocate(site="lightning.training_step", step=1, nbytes=3 * MiB, hold_steps=None)
    with chaoslight.inject(Schedule([fault], memory_budget=MemoryBudget(4 * MiB))) as run:
        fit(tiny_model(step_hook=hook), max_steps=4)
    assert [s for s, text in outcome.items() if text != "ok"] == [1, 2, 3]
    assert [e.kind for e in run.events] == ["fired"]
    with chaoslight.inject(Schedule(memory_budget=MemoryBudget(4 * MiB))):
        torch.empty(3 * MiB // 4)  # a new injection starts from an empty budget


@pytest.mark.parametrize(
    ("holds", "released"),
    [((2, 2), [(2, 0), (3, 1)]), ((3, 1), [(2, 1), (3, 0)])],
    ids=["first-allocated-released-first", "last-allocated-released-first"],
)
def test_two_equal_holds_are_released_in_either_order(
    holds: tuple[int, int], released: list[tuple[int, int]]
) -> None:
    """Two Allocate holds of one size (at steps 0 and 1) are released in either order."""
    hook, outcome = allocating(5 * MiB // 2)
    first, second = (
        Allocate(site="lightning.training_step", step=step, nbytes=MiB, hold_steps=hold)
        for step, hold in zip((0, 1), holds, strict=True)
    )
    schedule = Schedule([first, second], memory_budget=MemoryBudget(4 * MiB))
    with chaoslight.inject(schedule) as run:
        fit(tiny_model(step_hook=hook), max_steps=5)
    faults = [str(first), str(second)]
    assert [(e.step, faults.index(e.fault)) for e in run.events if e.kind == "released"] == released
    # 2.5 MiB fits beside one 1 MiB hold, not beside two: only step 1 held both.
    assert [step for step, text in outcome.items() if text != "ok"] == [1]


def test_allocate_over_the_budget_raises_the_simulated_oom() -> None:
    """An Allocate bigger than what is left of the budget raises torch.OutOfMemoryError."""
    fault = Allocate(site="lightning.training_step", step=1, nbytes=9 * MiB)
    model = tiny_model()
    with (
        chaoslight.inject(Schedule([fault], memory_budget=MemoryBudget(8 * MiB))) as run,
        pytest.raises(torch.OutOfMemoryError) as caught,
    ):
        fit(model, max_steps=4)
    assert str(caught.value).startswith(f"{OOM_PREFIX} 9.00 MiB. GPU 0 has a total capacity")
    assert [(e.kind, e.site, e.step) for e in run.events] == [
        ("fired", "lightning.training_step", 1)
    ]
    assert [step for step, _ in model.batches] == [0]


@pytest.mark.parametrize(("rank", "runs_out"), [("0", False), ("1", True), ("2", False)])
def test_budget_oom_only_on_the_rank_holding_memory(
    rank_env: pytest.MonkeyPatch, rank: str, runs_out: bool
) -> None:
    """With rank 1 holding 6 of 8 MiB, a user's 4 MiB torch.randn runs out on rank 1 only."""
    rank_env.setenv("RANK", rank)
    hook, outcome = allocating(4 * MiB)
    fault = Allocate(
        site="lightning.training_step", rank=1, step=0, nbytes=6 * MiB, hold_steps=None
    )
    with chaoslight.inject(Schedule([fault], memory_budget=MemoryBudget(8 * MiB))) as run:
        fit(tiny_model(step_hook=hook), max_steps=2)
    assert [e.rank for e in run.fired()] == ([1] if runs_out else [])
    assert [text.startswith(OOM_PREFIX) for text in outcome.values()] == [runs_out, runs_out]
    assert all(f" GPU {rank} " in text for text in outcome.values() if text != "ok")


def test_freed_tensors_give_their_bytes_back() -> None:
    """Under a budget, deleting a tensor frees its bytes: the next allocation then succeeds."""
    with chaoslight.inject(Schedule(memory_budget=MemoryBudget(8 * MiB))):
        first = torch.randn(6 * MiB // 4)
        with pytest.raises(torch.OutOfMemoryError, match=f"^{OOM_PREFIX} 4.00 MiB"):
            torch.zeros(MiB, dtype=torch.float32)
        with pytest.raises(torch.OutOfMemoryError):
            torch.ones_like(first)
        del first
        second = torch.zeros(MiB)
        third = torch.full((MiB // 4,), 1.0)
        assert second.numel() == MiB and third.numel() == MiB // 4


def test_small_tensors_are_not_counted() -> None:
    """Tensors below min_tracked_bytes never count against the budget."""
    budget = MemoryBudget(limit_bytes=MiB, min_tracked_bytes=MiB // 2)
    with chaoslight.inject(Schedule(memory_budget=budget)):
        kept = [torch.empty(MiB // 16) for _ in range(64)]  # 64 x 256 KiB, none tracked
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(MiB // 2)  # 2 MiB: tracked, over the 1 MiB limit
    assert len(kept) == 64


def test_budget_does_not_outlive_the_injection() -> None:
    """After the inject block, allocations of any size are plain torch again."""
    with chaoslight.inject(Schedule(memory_budget=MemoryBudget(MiB))):
        torch.save(1, io.BytesIO())
    big = torch.empty(4 * MiB)
    assert big.numel() == 4 * MiB
