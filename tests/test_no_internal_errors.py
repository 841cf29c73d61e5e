"""No exception ever originates in chaoslight's own frames: random schedules of every kind
(with a memory budget) against correct programs are judged, never crash chaoslight. And
the judgement can fail: an error planted in chaoslight's code is told from a deliberate
injection by the runtime's mark, not by the name of the function that raised it."""

from __future__ import annotations

import io
import signal
import time
import types

import pytest
import torch
from helpers import fit, tiny_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import chaoslight._runtime._actions as actions
import chaoslight._runtime._engine as engine
from chaoslight import HangDetected, MemoryBudget, Preempt, Schedule, Watchdog, judge
from chaoslight._report._records import ExceptionInfo
from chaoslight._runtime._memory import format_bytes
from chaoslight._search._inprocess import run_in_process
from chaoslight._verdict._oracle import FAILED_CLEANLY, INTERNAL_RULE, internal_error
from chaoslight.strategies import (
    allocations,
    corruptions,
    delays,
    dropped_syncs,
    ooms,
    raises,
    reorders,
)

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
@pytest.mark.usefixtures("lightning_in_process")
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


def _saved() -> bytes:
    buffer = io.BytesIO()
    torch.save({"w": 1}, buffer)
    return buffer.getvalue()


SAVED = _saved()


def load_once() -> None:
    """A program with one site and nothing else: a torch.load from memory."""
    torch.load(io.BytesIO(SAVED))


def test_an_error_planted_in_chaoslight_is_an_internal_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bug in the engine's firing code (here: the OOM factory called with the wrong
    arguments) is reported as chaoslight's internal error, with its real traceback, even
    in a function that also raises on purpose."""
    monkeypatch.setattr(actions, "simulated_oom", format_bytes)
    outcome = run_in_process(load_once, Schedule.parse("oom@torch.load"))
    traceback = outcome.ranks[0].exception.traceback  # type: ignore[union-attr]
    assert "in _apply" in traceback and "NoneType: None" not in traceback
    verdict = judge(outcome)
    assert verdict.internal and verdict.rule == INTERNAL_RULE, verdict.reason
    assert "raised in chaoslight: _apply_oom" in verdict.reason


def test_a_deliberate_raise_from_a_renamed_function_is_still_deliberate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The injected error is the fault's whatever the engine's functions are called: the
    mark on the exception decides, so the run failed cleanly by its fault."""
    apply = engine.Engine._apply
    code = apply.__code__.replace(co_name="_throwaway", co_qualname="Engine._throwaway")
    renamed = types.FunctionType(code, apply.__globals__, "_throwaway", apply.__defaults__)
    monkeypatch.setattr(engine.Engine, "_apply", renamed)
    outcome = run_in_process(load_once, Schedule.parse("raise@torch.load exception=ValueError"))
    assert "in _throwaway" in outcome.ranks[0].exception.traceback  # type: ignore[union-attr]
    verdict = judge(outcome)
    assert not verdict.internal and verdict.rule == FAILED_CLEANLY, verdict.reason


def test_what_a_c_signal_handler_raises_at_a_preemption_notice_is_deliberate() -> None:
    """A program that turns SIGTERM into KeyboardInterrupt (a handler written in C, which
    raises in chaoslight's frame that sent the signal): the error is the notice's, marked."""
    from chaoslight._runtime._preempt import Notices

    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt) as raised:
            Notices(lambda *args, **kwargs: None).deliver(Preempt(site="torch.load"), 0, None)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert raised.value.__traceback__ is not None
    assert ExceptionInfo.of(raised.value).deliberate


@pytest.mark.parametrize("counted_by", ["allocator", "ops"])
def test_a_memory_budgets_oom_is_deliberate_not_internal(
    counted_by: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tensor over the memory budget raises the simulated OOM, from the budget's own code
    (the dispatch mode) or from torch's allocator (the CPU allocator's refusal): deliberate
    either way, so the verdict is the program's failure, never chaoslight's internal error."""
    from chaoslight._runtime import _cpu_budget

    if counted_by == "ops":
        monkeypatch.setattr(_cpu_budget, "counter", lambda: None)

    def allocate() -> None:
        torch.ones(2**21, dtype=torch.uint8)

    schedule = Schedule([], memory_budget=MemoryBudget(2**20, 2**16))
    outcome = run_in_process(allocate, schedule)
    info = outcome.ranks[0].exception
    assert info is not None and info.type == "OutOfMemoryError" and info.deliberate
    assert ("_dispatch_budget.py" in info.traceback) == (counted_by == "ops")
    verdict = judge(outcome)
    assert verdict.failed and not verdict.internal, verdict.reason


def test_the_watchdogs_hang_interrupt_is_deliberate() -> None:
    """HangDetected, raised by chaoslight's own signal handler in the main thread, carries
    the mark: a hang the watchdog ends is the run's hang, not chaoslight's error."""
    with pytest.raises(HangDetected) as raised, Watchdog(0.1, interrupt_after=0.0):
        time.sleep(5)
    assert ExceptionInfo.of(raised.value).deliberate
    assert raised.value.__traceback__ is not None
