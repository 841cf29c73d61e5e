"""Gates: once the engine hears of every move of the step, a patch none of whose sites can
fire is closed, and its calls go straight to the wrapped function with no frame of ours
(``chaoslight/_runtime/_gates.py``). What fires, and where, is what it was."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import fit, tiny_loader, tiny_model, tiny_trainer

import chaoslight
from chaoslight import Delay, Schedule
from chaoslight._runtime._engine import Engine
from chaoslight._runtime._inject import active
from chaoslight._schedule._catalog import SITES as CATALOGUE
from chaoslight._sites._loop import HookPatch
from chaoslight._sites._patch import wrap_attribute

pytestmark = pytest.mark.usefixtures("rank_env", "lightning_in_process")


@pytest.fixture
def wrapper_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int | None]]:
    """Every call that reached the engine through a site's wrapper: (site, step)."""
    seen: list[tuple[str, int | None]] = []
    call = Engine.call

    def counted(self: Engine, site: str, *args: Any) -> Any:
        seen.append((site, self.step()))
        return call(self, site, *args)

    monkeypatch.setattr(Engine, "call", counted)
    return seen


def test_every_site_armed_never_firing_reaches_no_wrapper_after_the_first_batch(
    wrapper_calls: list[tuple[str, int | None]],
) -> None:
    """The benchmark's schedule: after the training loop counted its first batch, no call
    of any site reaches chaoslight at all (before it, every gate is open)."""
    armed = Schedule([Delay(0.0, site=site, step=10**9) for site in CATALOGUE])
    with chaoslight.inject(armed) as run:
        fit(max_steps=4)
    assert run.fired() == []
    assert [site for site, step in wrapper_calls if step is not None] == []
    assert wrapper_calls, "before the first batch every gate is open"


def test_a_site_reaches_the_engine_only_at_its_faults_step(
    wrapper_calls: list[tuple[str, int | None]],
) -> None:
    fault = Delay(0.0, site="lightning.backward", step=2)
    with chaoslight.inject(fault) as run:
        fit(max_steps=5)
    assert [(e.site, e.step, e.call) for e in run.fired()] == [("lightning.backward", 2, 1)]
    stepped = Counter(step for site, step in wrapper_calls if site == "lightning.backward")
    assert stepped == Counter({2: 1})


def test_a_fault_at_a_resumed_step_fires_there(tmp_path: Path) -> None:
    """A fit resumed from a checkpoint jumps from no step to the saved one, which no batch
    counted: every gate is open until the loop counts its first batch, so a fault at the
    first resumed step (and one at the step after) fires exactly there."""
    first = tiny_trainer(max_steps=3, default_root_dir=tmp_path)
    first.fit(tiny_model(), tiny_loader(batches=3))  # an epoch's end: a resumable point
    checkpoint = tmp_path / "three.ckpt"
    first.save_checkpoint(checkpoint)
    faults = [
        Delay(0.0, site="lightning.training_step", step=3),
        Delay(0.0, site="lightning.on_train_batch_end", step=4),
        Delay(0.0, site="lightning.on_train_start", step=2),  # the restored step
    ]
    with chaoslight.inject(faults) as run:
        trainer = tiny_trainer(max_steps=6, default_root_dir=tmp_path)
        trainer.fit(tiny_model(), tiny_loader(batches=3), ckpt_path=str(checkpoint))
    assert [(e.site, e.step) for e in run.fired()] == [
        ("lightning.on_train_start", 2),
        ("lightning.training_step", 3),
        ("lightning.on_train_batch_end", 4),
    ]


def test_a_trainers_loop_points_close_and_its_optimizer_hooks_return_at_once() -> None:
    """In a Trainer program the plain loop's points (backward, a DataLoader's next batch,
    the optimizer step hooks) only track a loop's step: closed once the Trainer's loop
    runs, unless a fault of theirs can fire."""
    with chaoslight.inject(Schedule()) as run:
        injection = active()
        assert injection is not None and injection.engine is not None
        gates = injection.engine.gates
        hooks = [p for p in injection._patches if isinstance(p, HookPatch)]
        states: list[list[bool]] = []

        class Look(tiny_model().__class__):  # type: ignore[misc]
            def training_step(self, batch: Any, batch_idx: int) -> Any:
                states.append([bool(p.gate) for p in hooks])
                return super().training_step(batch, batch_idx)

        fit(Look(), max_steps=3)
    assert states == [[False]] * 3
    assert gates.unwatched >= {"torch.backward", "torch.optimizer_step", "torch.next_batch"}
    assert run.unwatched == frozenset()  # none of them armed: the report says nothing


def test_a_loop_fault_in_a_trainer_opens_its_point_at_its_step() -> None:
    fault = Delay(0.0, site="torch.optimizer_step", step=2)
    with chaoslight.inject(fault) as run:
        fit(max_steps=4)
    assert [(e.site, e.step) for e in run.fired()] == [("torch.optimizer_step", 2)]


def test_a_plain_loops_site_opens_at_each_step_its_fault_can_fire(tmp_path: Path) -> None:
    """No Trainer: the engine counts the loop's steps itself, so its gates are decided
    from the start; a save at step 2 fires, those at other steps pass uncounted."""
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with chaoslight.inject(Delay(0.0, site="torch.save", step=2)) as run:
        for _ in range(4):
            model(torch.ones(1, 2)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
            torch.save(model.state_dict(), io.BytesIO())
    assert [(e.site, e.step, e.call) for e in run.fired()] == [("torch.save", 2, 1)]
    assert run.reached[("torch.save", 0)] == 1 and "torch.save" in run.unwatched


def test_a_third_partys_wrapper_over_a_closed_gate_still_runs() -> None:
    """A closed gate skips only our wrapper: a profiler's wrapper made over ours while the
    schedule is armed still sees every call, and survives the undo."""
    import wrapt

    seen: list[int] = []

    def theirs(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        seen.append(1)
        return wrapped(*args, **kwargs)

    original = torch.save
    with chaoslight.inject(Delay(0.0, site="torch.save", step=10**9)):
        torch.save = wrapt.FunctionWrapper(torch.save, theirs)
        try:
            fit(max_steps=2)
            torch.save(1, io.BytesIO())
        finally:
            profiled = torch.save
    assert seen == [1]
    assert torch.save is profiled and profiled.__wrapped__ is original
    torch.save = original


def test_an_undone_patch_stays_closed() -> None:
    class Owner:
        def method(self) -> int:
            return 1

    patch = wrap_attribute(Owner, "method", lambda wrapped, i, a, k: 2)
    patch.close()
    assert Owner().method() == 1
    patch.open()
    assert Owner().method() == 2
    patch.undo()
    patch.open()
    assert not patch.gate and vars(Owner)["method"] is patch.original
    assert Owner().method() == 1


def test_every_always_installed_point_says_how_its_gate_opens() -> None:
    """A point installed whenever a schedule is active tracks something (the trainer, the
    step, a blocked rank's frame): its gate is never decided by sites it may not have."""
    from chaoslight._sites import PATCH_POINTS, Gating

    assert [p.key for p in PATCH_POINTS if p.always and p.gating is Gating.SITE] == []
