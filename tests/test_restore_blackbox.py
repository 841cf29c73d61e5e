"""Black-box restore: whatever happens in an inject() block, the process is as it was after.

The oracle does not trust chaoslight's own list of what it patches: it snapshots, by
identity, every attribute of the modules and classes sites live in (found from the
patch points *and* listed by hand), every signal handler, ``sys.meta_path`` and the
environment, then compares after a block that ran a random schedule, raised a random
exception, had a check whose ``exit()`` raised, and had a third party patch
``torch.save`` (which must survive, and still work).
"""

from __future__ import annotations

import functools
import io
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch
import wrapt
from helpers import ExitFails, fit, tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st

import chaoslight
from chaoslight import Delay, MemoryBudget, Raise, Schedule, Watchdog, _sites
from chaoslight._runtime import PROGRESS_SITES
from chaoslight._schedule._catalog import SITES
from chaoslight.strategies import schedules

# Crash is refused in-process: the kinds that may fire inside a test session.
IN_PROCESS_KINDS = ("delay", "raise", "oom", "drop_sync", "allocate", "reorder", "corrupt")
# Every block also arms torch.save (never firing), so the third party's patch of it
# lands on top of ours: the case where a careless undo clobbers theirs.
ARM_SAVE = Delay(0, site="torch.save", step=10**9)

MODULES = (
    "torch",
    "torch.distributed",
    "torch.distributed.distributed_c10d",
    "torch.cuda",
    "lightning.pytorch.trainer.call",
    "pytorch_lightning.trainer.call",
)
CLASSES_BY_HAND = (
    "lightning.pytorch:LightningModule",
    "pytorch_lightning:LightningModule",
    "lightning.pytorch.strategies:DDPStrategy",
    "lightning.pytorch.strategies:Strategy",
    "torch.nn:Module",
    "torch:Tensor",
)


def owners() -> dict[str, Any]:
    """Every object whose attributes are snapshotted, by a readable name."""
    found = {name: _sites.resolve(name) for name in MODULES + CLASSES_BY_HAND}
    missing = sorted(name for name, owner in found.items() if owner is None)
    assert missing == [], missing
    seen = {id(owner) for owner in found.values()}
    for point in _sites.PATCH_POINTS:
        for owner in point.owners():
            if id(owner) not in seen:
                seen.add(id(owner))
                label = getattr(owner, "__qualname__", None)
                module = owner.__name__ if label is None else owner.__module__
                found[f"{module}:{label or ''}"] = owner
    return found


def snapshot() -> dict[tuple[str, str], Any]:
    """Every attribute, handler and hook the oracle watches, as the objects themselves.

    Holding the objects (not their ids) keeps them alive, so no id can be reused.
    """
    state: dict[tuple[str, str], Any] = {}
    for label, owner in owners().items():
        for key, value in vars(owner).items():
            state[(label, key)] = value
    for signum in signal.valid_signals():
        state[("signal", str(signum))] = signal.getsignal(signum)
    from torch.optim import optimizer

    hooks = (optimizer._global_optimizer_pre_hooks, optimizer._global_optimizer_post_hooks)
    for family, registered in zip(("pre", "post"), hooks, strict=True):
        for key, hook in registered.items():
            state[(f"optimizer step {family}-hook", str(key))] = hook
    for index, finder in enumerate(sys.meta_path):
        state[("sys.meta_path", str(index))] = finder
    for key, value in os.environ.items():
        state[("os.environ", key)] = value
    return state


def differences(before: dict[Any, Any], after: dict[Any, Any]) -> list[Any]:
    """Keys added, removed or holding another object (strings compared by value)."""
    keys = set(before) | set(after)
    return sorted(
        key
        for key in keys
        if key not in before
        or key not in after
        or not (before[key] is after[key] or (key[0] == "os.environ" and before[key] == after[key]))
    )


@functools.cache
def warm_up() -> None:
    """Import every patch owner and let first-use caches fill, before any snapshot."""
    armed = Schedule([Delay(0, site=site, step=10**9) for site in SITES])
    with chaoslight.inject(armed, observe=PROGRESS_SITES):
        torch.save(1, io.BytesIO())


def wrapt_save(calls: list[str]) -> None:
    """A third party wraps torch.save with wrapt (a tracer would)."""

    def theirs(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        calls.append("theirs")
        return wrapped(*args, **kwargs)

    wrapt.wrap_function_wrapper(torch, "save", theirs)


def plain_save(calls: list[str]) -> None:
    """A third party replaces torch.save with a closure over the one it saw (ours)."""
    seen = torch.save

    def theirs(*args: Any, **kwargs: Any) -> Any:
        calls.append("theirs")
        return seen(*args, **kwargs)

    torch.save = theirs


THIRD_PARTIES: dict[str, Callable[[list[str]], None] | None] = {
    "none": None,
    "wrapt": wrapt_save,
    "plain": plain_save,
}

EXCEPTIONS = (
    None,
    ValueError("boom"),
    KeyboardInterrupt(),
    SystemExit(3),
    GeneratorExit(),
    torch.OutOfMemoryError("CUDA out of memory."),
)


def run_block(
    schedule: Schedule,
    observe: bool,
    failing_check: bool,
    watchdog: bool,
    third_party: str,
    exception: BaseException | None,
    body: Callable[[], None] = lambda: None,
) -> list[str]:
    """One inject() block as the property draws it; the third party's calls, afterwards."""
    assert "torch.save" in schedule.sites  # so that the third party wraps our wrapper
    calls: list[str] = []
    patch = THIRD_PARTIES[third_party]
    checks = [ExitFails()] if failing_check else []
    try:
        with chaoslight.inject(schedule, observe=PROGRESS_SITES if observe else (), checks=checks):
            dog = Watchdog(30.0, interrupt_after=1.0).start() if watchdog else None
            try:
                if patch is not None:
                    patch(calls)
                torch.save(1, io.BytesIO())
                body()
                if exception is not None:
                    raise exception
            finally:
                if dog is not None:
                    dog.stop()
    except BaseException as caught:
        # The block's own exception, or the failing check's exit error raised after it.
        assert caught is exception or (failing_check and str(caught) == "check exit failed")
    return calls


def check_restored(
    before: dict[Any, Any], original_save: Any, third_party: str, calls: list[str]
) -> None:
    """Everything as before, except the third party's torch.save, which must still work."""
    try:
        expected = [] if third_party == "none" else [("torch", "save")]
        assert differences(before, snapshot()) == expected
        assert chaoslight._runtime.active() is None and _sites.STATE.dispatcher is None
        if third_party != "none":
            calls.clear()
            buffer = io.BytesIO()
            torch.save({"x": 7}, buffer)  # their wrapper, then the original
            buffer.seek(0)
            assert calls == ["theirs"] and torch.load(buffer) == {"x": 7}
    finally:
        torch.save = original_save


@st.composite
def blocks(draw: Any) -> dict[str, Any]:
    """A random block: a schedule at random sites, and what else happens inside."""
    sites = draw(st.lists(st.sampled_from(sorted(SITES)), min_size=1, max_size=6, unique=True))
    budget = draw(st.none() | st.just(MemoryBudget(2**40)))
    schedule = draw(
        schedules(world_size=2, steps=4, sites=sites, faults=IN_PROCESS_KINDS, memory_budget=budget)
    )
    return {
        "schedule": Schedule([*schedule, ARM_SAVE], memory_budget=budget),
        "observe": draw(st.booleans()),
        "failing_check": draw(st.booleans()),
        "watchdog": draw(st.booleans()),
        "third_party": draw(st.sampled_from(sorted(THIRD_PARTIES))),
        "exception": draw(st.sampled_from(EXCEPTIONS)),
    }


@settings(max_examples=40)
@given(blocks())
def test_everything_is_restored_except_the_third_partys_patch(block: dict[str, Any]) -> None:
    """After any block, every watched attribute, handler and hook is the same object as
    before, except a third party's torch.save made inside the block, which still works."""
    warm_up()
    original_save = torch.save
    before = snapshot()
    calls = run_block(**block)
    check_restored(before, original_save, block["third_party"], calls)


@pytest.mark.parametrize("third_party", sorted(THIRD_PARTIES))
@pytest.mark.usefixtures("lightning_in_process")
def test_a_failing_fit_restores_everything_too(third_party: str) -> None:
    """A real fit whose schedule fires and then raises restores all the same."""
    warm_up()
    schedule = Schedule(
        [
            Delay(0, site="lightning.training_step", times=None),
            Raise(ValueError("at step 2"), site="lightning.backward", step=2),
            ARM_SAVE,
        ],
        memory_budget=MemoryBudget(2**40),
    )
    original_save = torch.save
    before = snapshot()
    calls = run_block(
        schedule,
        observe=True,
        failing_check=True,
        watchdog=True,
        third_party=third_party,
        exception=None,
        body=lambda: fit(tiny_model(), max_steps=4),
    )
    check_restored(before, original_save, third_party, calls)
