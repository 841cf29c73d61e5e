"""Checks in a single process: each catches its bug through inject(), the fixed twin passes."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch
from helpers import fit, tiny_model

import chaoslight
from chaoslight import CheckFailed, Schedule
from chaoslight.checks import (
    CHECKS,
    Check,
    Deterministic,
    ErrorsSurface,
    Evidence,
    FiniteGrads,
    FiniteLoss,
    NoHang,
    ReplicasInSync,
    Violation,
    check_by_name,
)

pytestmark = pytest.mark.usefixtures("lightning_in_process")


def test_finite_loss_names_the_first_nan_step() -> None:
    """FiniteLoss fails on a NaN loss and names the step it first appeared at."""
    with pytest.raises(CheckFailed) as info:  # noqa: SIM117
        with chaoslight.inject("corrupt@lightning.training_step step=2", checks=[FiniteLoss()]):
            fit(max_steps=4)
    (violation,) = info.value.violations
    assert violation.check == "finite-loss" and violation.step == 2 and violation.rank == 0
    assert "nan" in violation.message


def test_finite_checks_pass_a_clean_run() -> None:
    """FiniteLoss and FiniteGrads pass a run with no poison."""
    with chaoslight.inject(Schedule(), checks=[FiniteLoss(), FiniteGrads()]) as run:
        fit(max_steps=4)
    assert run.violations == []


def test_finite_grads_names_parameter_and_step() -> None:
    """FiniteGrads fails before the optimizer step whose gradient is NaN, naming the parameter."""
    with pytest.raises(CheckFailed) as info:  # noqa: SIM117
        with chaoslight.inject("corrupt@lightning.training_step step=1", checks=[FiniteGrads()]):
            fit(max_steps=3)
    (violation,) = info.value.violations
    assert violation.step == 1 and violation.message.startswith("the gradient of 'layer.")


@pytest.mark.filterwarnings("ignore:`training_step` returned `None`:UserWarning")
def test_errors_surface_accepts_a_consistent_recovery() -> None:
    """One process that catches the injected OOM and skips the batch recovered: no violation."""
    model = tiny_model(catch_forward=True)
    with chaoslight.inject("oom@lightning.forward step=1", checks=[ErrorsSurface()]) as run:
        fit(model, max_steps=3)
    assert run.violations == [] and len(run.fired()) == 1
    assert model.caught and model.caught[0][0] == 1


def test_errors_surface_passes_when_the_oom_propagates() -> None:
    """ErrorsSurface passes when the injected OOM ends fit with that OutOfMemoryError."""
    with pytest.raises(torch.OutOfMemoryError):  # noqa: SIM117
        with chaoslight.inject("oom@lightning.forward step=1", checks=[ErrorsSurface()]) as run:
            fit(max_steps=3)
    assert run.violations == []


def test_deterministic_compares_each_run_with_the_first() -> None:
    """Deterministic passes two identical runs and names where a perturbed third parts."""
    check = Deterministic()
    for _ in range(2):
        with chaoslight.inject(Schedule(), checks=[check]):
            fit(max_steps=3)
    with pytest.raises(CheckFailed, match="part at parameter") as info:  # noqa: SIM117
        with chaoslight.inject("corrupt@lightning.next_batch nth=2", checks=[check]):
            fit(max_steps=3)
    assert info.value.violations[0].step == 1


def test_no_hang_in_process_reports_where_it_waited() -> None:
    """NoHang interrupts an in-process run stuck past its timeout and names the site."""
    started = time.monotonic()
    with pytest.raises(chaoslight.ChaosError):  # noqa: SIM117
        with chaoslight.inject(
            "delay@lightning.on_train_batch_end step=1 seconds=30", checks=[NoHang(1.0)]
        ) as run:
            fit(max_steps=3)
    assert time.monotonic() - started < 30 / 2  # interrupted long before the 30 s delay ended
    assert any("lightning.on_train_batch_end" in str(v) for v in run.violations), run.violations


def test_replicas_in_sync_single_rank_passes() -> None:
    """With one rank there is nothing to compare: ReplicasInSync passes."""
    with chaoslight.inject(Schedule(), checks=[ReplicasInSync()]) as run:
        fit(max_steps=2)
    assert run.violations == []


class LossBelow(Check):
    """A user check: the last logged training loss must end below a bound."""

    name = "loss-below"

    def __init__(self, bound: float) -> None:
        self.bound = bound

    def observer(self) -> Any:
        from chaoslight.checks import observe, observer_class

        check = self

        def on_train_batch_end(self: Any, trainer: Any, module: Any, outputs: Any, *a: Any) -> None:
            observe(check.name, trainer, {"loss": float(outputs["loss"])})

        return observer_class("LossBelowObserver", {"on_train_batch_end": on_train_batch_end})()

    def judge(self, evidence: Evidence) -> list[Violation]:
        losses = [facts["loss"] for _, facts in evidence.observations(self.name)]
        if losses and losses[-1] >= self.bound:
            return [Violation(self.name, f"final loss {losses[-1]:.3f} >= {self.bound}")]
        return []


def test_user_check_protocol() -> None:
    """A user's Check subclass observes every step and fails the run through the same path."""
    with pytest.raises(CheckFailed, match="loss-below: final loss"):  # noqa: SIM117
        with chaoslight.inject(Schedule(), checks=[LossBelow(0.0)]):
            fit(max_steps=2)
    with chaoslight.inject(Schedule(), checks=[LossBelow(1e9)]) as run:
        fit(max_steps=2)
    assert run.violations == []


def test_check_names_are_stable_and_misspellings_suggest() -> None:
    """Check names are the stable CLI names; a misspelt one suggests the right one."""
    assert list(CHECKS) == [
        "replicas-in-sync",
        "no-hang",
        "finite-loss",
        "finite-grads",
        "disjoint-shards",
        "errors-surface",
        "deterministic",
        "resume-equivalence",
        "restart-equivalence",
        "exit-status",
        "buffers-in-sync",
        "data-order",
        "learned-invariants",
        "framework-facts",
    ]
    assert isinstance(check_by_name("finite-loss"), FiniteLoss)
    with pytest.raises(chaoslight.InvalidArgument, match="did you mean 'finite-loss'"):
        check_by_name("finite-los")


def test_replicas_in_sync_compares_no_shards() -> None:
    """Under a strategy whose ranks hold shards of the parameters (FSDP, model parallel)
    there are no replicas to compare; DDP's ranks hold replicas."""
    from lightning.pytorch.strategies import DDPStrategy, FSDPStrategy, ModelParallelStrategy

    from chaoslight._checks._invariants import shards_parameters

    class Custom(FSDPStrategy):  # a program's own subclass shards as its base does
        pass

    for cls, sharded in ((FSDPStrategy, True), (ModelParallelStrategy, True), (Custom, True)):
        assert shards_parameters(cls.__new__(cls)) is sharded
    assert not shards_parameters(DDPStrategy.__new__(DDPStrategy))
