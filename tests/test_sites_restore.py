"""Patching and restoring: only named sites are wrapped, and every original comes back."""

from __future__ import annotations

import functools
import io
import types
from typing import Any

import pytest
import torch
import wrapt
from helpers import ExitFails, changed, faults, patched_attributes
from hypothesis import given, settings
from hypothesis import strategies as st

import chaoslight
from chaoslight import (
    OOM,
    Crash,
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
from chaoslight._schedule._faults import FAULT_KINDS
from chaoslight._sites import _core
from chaoslight._sites._patch import MISSING, wrap_attribute

# Crash is refused in-process (it would kill the test session): see the crash tests below.
IN_PROCESS_KINDS = tuple(kind for kind in sorted(FAULT_KINDS) if kind != "crash")


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
    real = _core.wrap_attribute
    calls = []

    def failing(owner: Any, name: str, wrapper: Any) -> Any:
        calls.append(name)
        if len(calls) == 5:
            raise RuntimeError("cannot patch")
        return real(owner, name, wrapper)

    monkeypatch.setattr(_core, "wrap_attribute", failing)
    with pytest.raises(RuntimeError, match="cannot patch"), chaoslight.inject(arm_everything()):
        pass
    assert len(calls) == 5
    assert changed(before, patched_attributes()) == []
    from torch.optim import optimizer  # the loop's step hooks, registered first, are gone

    assert not optimizer._global_optimizer_pre_hooks
    assert not optimizer._global_optimizer_post_hooks
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
@given(st.lists(faults(IN_PROCESS_KINDS), max_size=8), st.booleans(), EXCEPTIONS)
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


# -- a third party patching the same attribute while we are active -------------------------


def tagging(tag: str, calls: list[str]) -> Any:
    """A wrapt wrapper that notes ``tag`` in ``calls`` and calls through."""

    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        calls.append(tag)
        return wrapped(*args, **kwargs)

    return wrapper


class Base:
    """An owner with every kind of attribute a patch point may wrap."""

    def method(self, x: int) -> tuple[str, int]:
        return ("method", x)

    @staticmethod
    def static(x: int) -> tuple[str, int]:
        return ("static", x)

    @classmethod
    def klass(cls, x: int) -> tuple[str, int]:
        return (cls.__name__, x)


class Child(Base):
    """Inherits everything: patching it stores a wrapper on Child only."""


@pytest.mark.parametrize("owner", [Base, Child], ids=["defined", "inherited"])
@pytest.mark.parametrize("name", ["method", "static", "klass"])
def test_a_wrapper_made_on_top_of_ours_survives_and_wraps_the_original(
    owner: type, name: str
) -> None:
    """A third party's wrapt wrapper over ours survives undo, and then wraps the original."""
    stored = vars(owner).get(name, MISSING)
    expected = getattr(Child(), name)(1)
    calls: list[str] = []
    patch = wrap_attribute(owner, name, tagging("ours", calls))
    try:
        wrapt.wrap_function_wrapper(owner, name, tagging("theirs", calls))
        theirs = vars(owner)[name]
        assert getattr(Child(), name)(1) == expected and calls == ["theirs", "ours"]
        patch.undo()
        assert vars(owner)[name] is theirs
        calls.clear()
        assert getattr(Child(), name)(1) == expected
        assert calls == ["theirs"]
    finally:
        if stored is MISSING:
            delattr(owner, name)
        else:
            setattr(owner, name, stored)


@pytest.mark.parametrize("owner", [Base, Child], ids=["defined", "inherited"])
@pytest.mark.parametrize("name", ["method", "static", "klass"])
def test_undo_puts_back_exactly_what_was_stored(owner: type, name: str) -> None:
    """With no third party, undo restores vars(owner) exactly (deleted again if inherited)."""
    before = dict(vars(owner))
    expected = getattr(Child(), name)(1)
    patch = wrap_attribute(owner, name, tagging("ours", []))
    assert vars(owner)[name] is not before.get(name)
    patch.undo()
    assert dict(vars(owner)) == before
    assert all(vars(owner)[key] is value for key, value in before.items())
    assert getattr(Child(), name)(1) == expected


def module_with_save() -> tuple[types.ModuleType, Any]:
    """A module holding a plain function ``save``, and that function."""

    def save(obj: Any) -> tuple[str, Any]:
        return ("saved", obj)

    module = types.ModuleType("owner")
    module.save = save  # type: ignore[attr-defined]
    return module, save


def test_a_replacement_with_no_reference_to_ours_is_left_alone() -> None:
    """Someone replaced the attribute outright while we were active: theirs stays."""
    module, _ = module_with_save()
    patch = wrap_attribute(module, "save", tagging("ours", []))

    def replacement(obj: Any) -> str:
        return "replaced"

    module.save = replacement  # type: ignore[attr-defined]
    patch.undo()
    assert module.save is replacement


def test_a_closure_over_ours_passes_straight_through_after_undo() -> None:
    """A functools.wraps wrapper calling "the old save" (ours) runs the original after undo."""
    module, save = module_with_save()
    calls: list[str] = []
    patch = wrap_attribute(module, "save", tagging("ours", calls))
    ours = module.save

    @functools.wraps(ours)
    def theirs(obj: Any) -> Any:
        calls.append("theirs")
        return ours(obj)

    module.save = theirs  # type: ignore[attr-defined]
    patch.undo()
    assert module.save is theirs and theirs.__wrapped__ is save  # type: ignore[attr-defined]
    assert module.save(3) == ("saved", 3)
    assert calls == ["theirs"]  # our layer, still in their closure, does nothing any more


def test_unwinding_a_stack_of_ours_and_theirs_in_reverse_order() -> None:
    """ours, theirs, ours again on one attribute: undone in reverse, theirs alone remains."""
    module, save = module_with_save()
    calls: list[str] = []
    first = wrap_attribute(module, "save", tagging("first", calls))
    wrapt.wrap_function_wrapper(module, "save", tagging("theirs", calls))
    theirs = module.save
    second = wrap_attribute(module, "save", tagging("second", calls))
    _sites.uninstall([first, second])
    assert module.save is theirs and theirs.__wrapped__ is save
    assert module.save(1) == ("saved", 1) and calls == ["theirs"]


def test_inject_keeps_a_wrapper_made_inside_the_block() -> None:
    """A wrapt wrapper over torch.save made inside inject() survives it and wraps the original."""
    original = torch.save
    calls: list[str] = []
    try:
        with chaoslight.inject(Delay(0, site="torch.save", times=None)) as run:
            wrapt.wrap_function_wrapper(torch, "save", tagging("theirs", calls))
            theirs = torch.save
            torch.save(1, io.BytesIO())
        assert torch.save is theirs and theirs.__wrapped__ is original
        torch.save(2, io.BytesIO())
        assert calls == ["theirs", "theirs"] and len(run.fired()) == 1
    finally:
        torch.save = original


def test_a_monkeypatch_undone_after_the_block_brings_back_an_inert_wrapper(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """monkeypatch's undo puts back what it saw, our wrapper: inert, a plain call through."""
    original = torch.save
    try:
        with chaoslight.inject(Raise(ValueError("first"), site="torch.save", times=None)):
            monkeypatch.setattr(torch, "save", lambda *args, **kwargs: None)
        monkeypatch.undo()
        assert torch.save is not original and torch.save.__wrapped__ is original
        torch.save(1, io.BytesIO())  # no fault: the inert wrapper only calls through
        with (
            chaoslight.inject(Raise(ValueError("again"), site="torch.save")) as run,
            pytest.raises(ValueError, match="again"),
        ):
            torch.save(1, io.BytesIO())
        assert len(run.fired()) == 1
    finally:
        torch.save = original


def test_uninstall_undoes_the_rest_when_one_undo_fails() -> None:
    """One patch that cannot be undone does not leave the others installed."""
    first_module, first_save = module_with_save()
    second_module, _ = module_with_save()
    first = wrap_attribute(first_module, "save", tagging("ours", []))
    second = wrap_attribute(second_module, "save", tagging("ours", []))
    second.owner = object()  # vars() of a plain object() fails
    with pytest.raises(TypeError):
        _sites.uninstall([first, second])
    assert first_module.save is first_save


# -- what inject() refuses and what it always cleans up -------------------------------------


def test_inject_refuses_a_crash_in_process() -> None:
    """A Crash in-process would kill pytest: inject() refuses it in one line, patches nothing."""
    before = patched_attributes()
    crash = Crash(site="lightning.training_step", step=2)
    with pytest.raises(InvalidSchedule) as caught:
        chaoslight.inject([Delay(0, site="torch.save"), crash])
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("crash@lightning.training_step step=2 would kill this process")
    assert "chaoslight.World" in message and "allow_crash=True" in message
    assert changed(before, patched_attributes()) == [] and _runtime.active() is None


def test_allow_crash_arms_a_crash_that_has_not_fired() -> None:
    """allow_crash=True arms the Crash; it fires only at its trigger (never reached here)."""
    with chaoslight.inject(Crash(site="torch.save", step=5), allow_crash=True) as run:
        torch.save(1, io.BytesIO())  # step is None outside a fit: the crash never matches
    assert run.fired() == []


def test_allow_crash_must_be_a_bool() -> None:
    """allow_crash='yes' is a one-line InvalidArgument naming it."""
    with pytest.raises(chaoslight.InvalidArgument, match=r"^allow_crash='yes' must be True or"):
        chaoslight.inject(allow_crash="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "signal",
    [0, -9, 2, 12, 65, 10**6],
    ids=["zero", "negative", "sigint", "sigusr2", "past-nsig", "huge"],
)
def test_crash_accepts_only_signals_that_mean_a_crash(signal: int) -> None:
    """Crash(signal=...) refuses non-crash signals in one line naming the value and the list."""
    with pytest.raises(chaoslight.InvalidArgument) as caught:
        Crash(site="torch.save", signal=signal)
    message = str(caught.value)
    assert message.startswith(f"signal={signal} is not a crash signal")
    assert message.endswith("accepted: SIGKILL 9, SIGTERM 15, SIGABRT 6, SIGSEGV 11, SIGBUS 7")
    assert "\n" not in message


def test_crash_names_why_sigint_and_sigusr2_are_refused() -> None:
    """SIGINT is an interrupt and SIGUSR2 the watchdog's: the message says so."""
    with pytest.raises(chaoslight.InvalidArgument, match="SIGINT is a KeyboardInterrupt"):
        Crash(site="torch.save", signal=2)
    with pytest.raises(chaoslight.InvalidArgument, match="SIGUSR2 is chaoslight's watchdog"):
        Crash(site="torch.save", signal=12)


def test_crash_stores_a_signal_enum_as_its_number() -> None:
    """Crash(signal=signal.SIGTERM) is Crash(signal=15): the same text, JSON and equality."""
    import signal

    assert Crash(site="torch.save", signal=signal.SIGTERM) == Crash(site="torch.save", signal=15)
    assert type(Crash(site="torch.save", signal=signal.SIGTERM).signal) is int


@pytest.mark.parametrize("block_raises", [False, True])
def test_a_check_whose_exit_raises_leaves_nothing_patched(block_raises: bool) -> None:
    """A failing check exit() propagates, but every patch is undone and nothing stays active."""
    before = patched_attributes()
    with (
        pytest.raises(RuntimeError, match="exit failed"),
        chaoslight.inject(Delay(0, site="torch.save"), checks=[ExitFails()]),
    ):
        assert changed(before, patched_attributes()) != []
        if block_raises:
            raise ValueError("the block failed")
    assert changed(before, patched_attributes()) == []
    assert _runtime.active() is None and _sites.STATE.dispatcher is None
