"""Patching and restoring: only named sites are wrapped, and every original comes back."""

from __future__ import annotations

import io
from typing import Any

import pytest
import torch
from helpers import changed, faults, patched_attributes
from hypothesis import given, settings
from hypothesis import strategies as st

import chaoslight
from chaoslight import (
    OOM,
    Delay,
    InjectionActive,
    InvalidSchedule,
    MemoryBudget,
    Raise,
    Schedule,
    _runtime,
    _sites,
)
from chaoslight._schedule._catalog import LIGHTNING_HOOKS, SITES


def arm_everything() -> Schedule:
    """A schedule naming every site (never firing), a deferred OOM and a budget."""
    never = 10**9
    return Schedule(
        [Delay(0, site=site, step=never) for site in SITES]
        + [OOM(site="torch.save", deferred=True, step=never)],
        memory_budget=MemoryBudget(2**40),
    )


def test_every_patch_point_is_wrapped_inside_and_restored_after() -> None:
    """Inside inject() every patch point's attribute is a wrapper; after, the same original."""
    before = patched_attributes()
    with chaoslight.inject(arm_everything()):
        inside = patched_attributes()
    assert changed(before, inside) == sorted(before)  # all of them were wrapped
    assert changed(before, patched_attributes()) == []
    assert _runtime.active() is None


def test_patch_points_cover_both_lightning_flavours_and_c10d() -> None:
    """The patch points reach lightning.pytorch, pytorch_lightning and torch's c10d module."""
    import lightning.pytorch.trainer.call as lightning_call
    import pytorch_lightning.trainer.call as pl_call
    import torch.distributed.distributed_c10d as c10d

    owners = {id(owner) for point in _sites.PATCH_POINTS for owner in point.owners()}
    for module in (lightning_call, pl_call, c10d, torch.distributed, torch.cuda, torch):
        assert id(module) in owners, module.__name__


def test_only_the_named_sites_are_patched() -> None:
    """A schedule at torch.save wraps torch.save; torch.load, collectives, hooks are untouched."""
    import lightning.pytorch.trainer.call as call

    load, all_reduce = torch.load, torch.distributed.all_reduce
    strategy_hook = call._call_strategy_hook
    before = patched_attributes()
    with chaoslight.inject(Delay(0, site="torch.save")):
        assert torch.save is not before[(id(torch), "save")]
        assert torch.load is load
        assert torch.distributed.all_reduce is all_reduce
        assert call._call_strategy_hook is strategy_hook
        now = patched_attributes()
    wrapped = {(owner, attr) for owner, attr in changed(before, now)}
    always = {
        (id(owner), point.attribute)
        for point in _sites.PATCH_POINTS
        if point.always
        for owner in point.owners()
    }
    assert wrapped == {(id(torch), "save")} | always


def test_nested_inject_raises_and_leaves_the_outer_active() -> None:
    """A second inject() raises InjectionActive (one line); the outer one keeps firing."""
    outer = chaoslight.inject(Raise(ValueError("outer"), site="torch.save", times=None))
    with outer as run:
        with (
            pytest.raises(InjectionActive) as caught,
            chaoslight.inject(Delay(0, site="torch.load")),
        ):
            pass
        assert "\n" not in str(caught.value)
        assert "one schedule per process" in str(caught.value)
        assert _runtime.active() is outer
        with pytest.raises(ValueError, match="outer"):
            torch.save(1, io.BytesIO())
    assert [e.site for e in run.fired()] == ["torch.save"]
    assert _runtime.active() is None


def test_failed_entry_restores_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    """If installing a patch fails halfway, the ones already made are undone before it raises."""
    before = patched_attributes()
    real = _sites.wrap_attribute
    calls = []

    def failing(owner: Any, name: str, wrapper: Any) -> Any:
        calls.append(name)
        if len(calls) == 5:
            raise RuntimeError("cannot patch")
        return real(owner, name, wrapper)

    monkeypatch.setattr(_sites, "wrap_attribute", failing)
    with pytest.raises(RuntimeError, match="cannot patch"), chaoslight.inject(arm_everything()):
        pass
    assert len(calls) == 5
    assert changed(before, patched_attributes()) == []
    assert _runtime.active() is None and _sites.STATE.dispatcher is None


EXCEPTIONS = st.sampled_from(
    [
        None,
        ValueError("boom"),
        KeyboardInterrupt(),
        SystemExit(3),
        GeneratorExit(),
        torch.OutOfMemoryError("CUDA out of memory."),
        InjectionActive("x"),
    ]
)


@settings(max_examples=100)
@given(st.lists(faults(), max_size=8), st.booleans(), EXCEPTIONS)
def test_any_schedule_and_any_exception_restore_every_attribute(
    schedule_faults: list[Any], with_budget: bool, exception: BaseException | None
) -> None:
    """Whatever the schedule and whatever escapes the block, every original is back after."""
    before = patched_attributes()
    schedule = Schedule(schedule_faults, memory_budget=MemoryBudget(2**40) if with_budget else None)
    entered = None
    try:
        with chaoslight.inject(schedule) as run:
            entered = run
            assert _runtime.active() is not None
            if exception is not None:
                raise exception
    except BaseException as caught:
        # Entering fails only for a Raise whose "module:QualName" cannot be imported.
        assert caught is exception or (entered is None and isinstance(caught, InvalidSchedule))
    else:
        assert exception is None
    assert entered is None or entered.events == []
    assert changed(before, patched_attributes()) == []
    assert _runtime.active() is None and _sites.STATE.dispatcher is None


def test_catalogue_hooks_match_lightnings_hooks() -> None:
    """Every hook Lightning dispatches to callbacks or the module is a site, and no stale one."""
    import lightning.pytorch as pl
    from lightning.pytorch.core.hooks import CheckpointHooks, ModelHooks

    def hooks(cls: type) -> set[str]:
        return {name for name in vars(cls) if name.startswith("on_")}

    lightning = hooks(pl.Callback) | hooks(ModelHooks) | hooks(CheckpointHooks)
    lightning |= {"setup", "teardown", "configure_model"}
    assert lightning == set(LIGHTNING_HOOKS)
