"""No exception ever originates in chaoslight's own frames: random schedules of every kind
(with a memory budget) against correct programs are judged, never crash chaoslight."""

from __future__ import annotations

import pytest
from chaoslight.strategies import (
    allocations,
    corruptions,
    delays,
    dropped_syncs,
    ooms,
    raises,
    reorders,
)
from helpers import fit, tiny_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaoslight import MemoryBudget, Schedule
from chaoslight._search._inprocess import run_in_process
from chaoslight._search._oracle import internal_error, judge

SITES = [
    "lightning.training_step",
    "lightning.forward",
    "lightning.backward",
    "lightning.optimizer_step",
    "lightning.on_train_batch_end",
    "lightning.on_train_epoch_end",
    "torch.save",
    "dist.all_reduce",
    "dist.barrier",
]
COMMON = {"world_size": 1, "steps": 4, "sites": SITES}
ANY_FAULT = st.one_of(
    delays(max_seconds=0.01, resolution=0.005, **COMMON),  # type: ignore[arg-type]
    ooms(deferred=None, **COMMON),  # type: ignore[arg-type]
    allocations(max_bytes=2**22, **COMMON),  # type: ignore[arg-type]
    raises(**COMMON),  # type: ignore[arg-type]
    reorders(rank_divergent=True, **COMMON),  # type: ignore[arg-type]
    dropped_syncs(**COMMON),  # type: ignore[arg-type]
    corruptions(**COMMON),  # type: ignore[arg-type]
)
BUDGETS = st.none() | st.integers(2**20, 2**24).map(lambda n: MemoryBudget(n, 2**16))


def correct_program() -> None:
    """A plain, correct fit (checkpointing on, so torch.save runs) of a tiny model."""
    fit(tiny_model(), max_steps=4, enable_checkpointing=True, default_root_dir=".")


@pytest.mark.slow
@settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(faults=st.lists(ANY_FAULT, min_size=1, max_size=3), budget=BUDGETS)
def test_random_schedules_never_raise_inside_chaoslight(
    faults: list[object], budget: MemoryBudget | None, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Whatever fires, the run's exception (if any) is the fault's or the program's, never
    an internal error of chaoslight (the Allocate release bug was one)."""
    schedule = Schedule(faults, memory_budget=budget)  # type: ignore[arg-type]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path_factory.mktemp("run"))
        outcome = run_in_process(correct_program, schedule)
    assert internal_error(outcome) is None, outcome.report()
    assert not judge(outcome).internal
