"""Training loops that no Trainer runs (plain PyTorch, Lightning Fabric): the step counted
from optimizer steps (or the program's own marks), the loop and Fabric sites, faults that
fire where and when a schedule says, the baseline reach of a loop, and a Trainer program
left as it was (Lightning's own step stands)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import chaoslight
from chaoslight import Delay, Flip, Raise, RepeatBatch, Schedule
from chaoslight._checks._reach import ReachRecorder
from chaoslight._runtime._events import FIRED, NOTE
from chaoslight._runtime._evidence import OBSERVATION
from chaoslight._schedule import LOOP_SITES, SITES

STEPS = 4
pytestmark = pytest.mark.usefixtures("lightning_in_process")  # Lightning in this process


def plain_loop(
    marks: bool = False, optimizers: int = 1, save_to: Path | None = None
) -> list[torch.Tensor]:
    """A tiny single-process training loop; the batches it trained on, in order."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opts = [torch.optim.SGD(model.parameters(), lr=0.1) for _ in range(optimizers)]
    data = TensorDataset(torch.arange(STEPS * 2 * 3, dtype=torch.float32).view(-1, 3))
    seen = []
    for (x,) in DataLoader(data, batch_size=2):
        seen.append(x.clone())
        loss = model(x).pow(2).mean()
        loss.backward()
        for opt in opts:
            opt.step()
            opt.zero_grad()
        if save_to is not None:
            torch.save(model.state_dict(), save_to)
        if marks:
            chaoslight.mark_step()
    return seen


def fired(run: Any) -> list[tuple[str, int | None]]:
    return [(e.site, e.step) for e in run.events if e.kind == FIRED]


def test_the_loop_sites_are_in_the_catalogue_with_what_they_can_take() -> None:
    assert {"torch.backward", "torch.optimizer_step", "torch.next_batch"} == LOOP_SITES
    assert "batches" in SITES["torch.next_batch"].capabilities
    for name in ("forward", "backward", "optimizer_step", "save", "load", "barrier", "all_reduce"):
        assert f"fabric.{name}" in SITES
    assert "load" in SITES["fabric.load"].capabilities
    assert "sync" in SITES["fabric.barrier"].capabilities


@pytest.mark.parametrize("site", sorted(LOOP_SITES))
def test_a_step_is_the_work_up_to_the_end_of_an_optimizer_step(site: str) -> None:
    """Every loop site sees steps 0..3 in order, one per optimizer step, step 0 included,
    as the baseline's reach records them once the loop's run ends."""
    with chaoslight.inject(Schedule(), checks=[ReachRecorder()]) as run:
        plain_loop()
    facts = [e for e in run.events if e.kind == OBSERVATION and e.site == "reach"]
    assert len(facts) == 1, "a loop's reach is recorded once, when the run ends"
    # The DataLoader's last fetch, which ends the epoch, begins a fifth step.
    expected = list(range(STEPS + 1 if site == "torch.next_batch" else STEPS))
    assert json.loads(facts[0].detail)["steps"][site] == expected


def test_a_fault_at_a_step_fires_at_that_step_and_nowhere_else() -> None:
    schedule = Schedule([Raise("ValueError", ("injected",), site="torch.backward", step=2)])
    with pytest.raises(ValueError, match="injected"), chaoslight.inject(schedule) as run:
        plain_loop()
    assert fired(run) == [("torch.backward", 2)]


def test_a_save_after_the_optimizer_step_belongs_to_its_iteration(tmp_path: Path) -> None:
    """torch.save is no loop site, yet a step= fault there fires at the loop's step: the
    save after step 1's optimizer step is step 1's, as a Trainer's batch-end hook is."""
    schedule = Schedule([Delay(0.0, site="torch.save", step=1)])
    with chaoslight.inject(schedule) as run:
        plain_loop(save_to=tmp_path / "model.pt")
    assert fired(run) == [("torch.save", 1)]


def test_before_the_first_backward_a_plain_site_has_no_step(tmp_path: Path) -> None:
    schedule = Schedule([Delay(0.0, site="torch.save", step=0, times=1)])
    with chaoslight.inject(schedule) as run:
        torch.save({"before": 1}, tmp_path / "setup.pt")  # before training: no step
        plain_loop(save_to=tmp_path / "model.pt")
    assert fired(run) == [("torch.save", 0)]
    # Watched until its fault was spent: the call before training (a loop's step-0 faults
    # are watched from before its first backward) and the one at step 0.
    assert run.reached[("torch.save", 0)] == 2 and "torch.save" in run.unwatched


def test_torchs_own_optimizer_step_in_a_state_dicts_initialisation_is_no_training_step() -> None:
    """Reading a distributed optimizer state dict of an optimizer with no state yet, torch
    steps it once with zero gradients and every learning rate 0 (FSDP2's and Fabric's
    save and load): no step of the program's. Its steps stay 0..3, the optimizer-step
    site is reached at those only, and a fault there fires at the program's own step."""
    from torch.distributed.checkpoint import state_dict

    schedule = Schedule([Delay(0.0, site="torch.optimizer_step", step=1)])
    with chaoslight.inject(schedule, checks=[ReachRecorder()]) as run:
        model = torch.nn.Linear(3, 1)
        state_dict._init_optim_state(torch.optim.SGD(model.parameters(), lr=0.1))
        plain_loop()
    facts = [json.loads(e.detail) for e in run.events if e.kind == OBSERVATION]
    assert [f["steps"]["torch.optimizer_step"] for f in facts if "steps" in f] == [[0, 1, 2, 3]]
    assert fired(run) == [("torch.optimizer_step", 1)]
    assert state_dict._init_optim_state.__module__ == state_dict.__name__  # patched, then put back
    assert not hasattr(state_dict._init_optim_state, "__wrapped__")


def test_the_programs_own_marks_end_steps_once_it_marks() -> None:
    """Two optimizers per batch would count two steps; marks count one per batch."""
    schedule = Schedule([Raise("ValueError", ("x",), site="torch.backward", step=3)])
    with pytest.raises(ValueError), chaoslight.inject(schedule) as run:
        plain_loop(marks=True, optimizers=2)
    # Batch 0 runs before any mark (its two optimizer steps count), so the 4th batch is
    # step 3 once the marks have taken over.
    assert fired(run) == [("torch.backward", 3)]


def test_mark_step_does_nothing_without_a_schedule() -> None:
    chaoslight.mark_step()  # no injection: no error, no state


def test_a_repeated_batch_at_the_dataloader_is_read_again_at_the_next_step() -> None:
    schedule = Schedule([RepeatBatch(site="torch.next_batch", step=1)])
    with chaoslight.inject(schedule) as run:
        seen = plain_loop()
    clean = plain_loop()
    assert fired(run) == [("torch.next_batch", 1)]
    assert torch.equal(seen[2], clean[1]) and not torch.equal(seen[2], clean[2])
    assert [torch.equal(a, b) for a, b in zip(seen, clean, strict=True)] == [1, 1, 0, 1]


def test_a_flip_in_a_loop_changes_a_parameter_the_optimizer_steps() -> None:
    schedule = Schedule([Flip(site="torch.optimizer_step", step=2, target="param", bit="exponent")])
    with chaoslight.inject(schedule) as run:
        plain_loop()
    notes = [e.detail for e in run.events if e.kind == NOTE and e.site == "torch.optimizer_step"]
    assert len(notes) == 1 and "flipped the exponent bit" in notes[0], notes
    assert "param_groups[0]" in notes[0]


def test_in_a_trainer_program_lightnings_step_stands_and_loop_sites_pass_through() -> None:
    """A fit with the loop sites observed: none of them records a call (Lightning's own
    sites stand for them), and a fault a schedule puts there still fires at the fit's step."""
    pl = pytest.importorskip("lightning.pytorch")

    class Tiny(pl.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def fit() -> None:
        data = TensorDataset(torch.randn(8, 3))
        trainer = pl.Trainer(
            max_steps=STEPS,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            accelerator="cpu",
            devices=1,
        )
        trainer.fit(Tiny(), DataLoader(data, batch_size=2))

    schedule = Schedule([Delay(0.0, site="torch.optimizer_step", step=2)])
    with chaoslight.inject(schedule, observe=LOOP_SITES) as run:
        fit()
    assert fired(run) == [("torch.optimizer_step", 2)]
    assert {site for site, _ in run.reached} & LOOP_SITES == {"torch.optimizer_step"}


def fabric_loop(tmp_path: Path) -> float:
    fabric_module = pytest.importorskip("lightning.fabric")
    fabric = fabric_module.Fabric(accelerator="cpu", devices=1)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = fabric.setup(model, opt)
    loader = fabric.setup_dataloaders(DataLoader(TensorDataset(torch.randn(8, 3)), batch_size=2))
    for (x,) in loader:
        loss = model(x).pow(2).mean()
        fabric.backward(loss)
        opt.step()
        opt.zero_grad()
        fabric.save(tmp_path / "state.ckpt", {"model": model})
    fabric.barrier()
    return float(loss.detach())


@pytest.mark.parametrize(
    ("site", "step"),
    [
        ("fabric.forward", 0),
        ("fabric.backward", 1),
        ("fabric.optimizer_step", 2),
        ("fabric.save", 3),
        ("torch.next_batch", 0),
    ],
)
def test_each_fabric_site_fires_at_its_step(tmp_path: Path, site: str, step: int) -> None:
    schedule = Schedule([Raise("ValueError", ("injected",), site=site, step=step)])
    with pytest.raises(ValueError, match="injected"), chaoslight.inject(schedule) as run:
        fabric_loop(tmp_path)
    assert fired(run) == [(site, step)]


def test_fabric_setup_has_no_step_and_the_originals_come_back(tmp_path: Path) -> None:
    from lightning.fabric import Fabric
    from lightning.fabric.wrappers import _FabricModule, _FabricOptimizer

    originals: dict[str, Callable[..., Any]] = {
        "backward": Fabric.backward,
        "save": Fabric.save,
        "forward": _FabricModule.forward,
        "step": _FabricOptimizer.step,
        "autograd": torch.autograd.backward,
    }
    # fabric.save ends in a barrier at every step; the loop's own barrier is after the
    # last batch's fetch ended the DataLoader, which began a step past the last.
    at_end = Delay(0.0, site="fabric.barrier", step=STEPS)
    schedule = Schedule([Delay(0.0, site="fabric.setup"), at_end])
    with chaoslight.inject(schedule) as run:
        loss = fabric_loop(tmp_path)
    assert math.isfinite(loss)
    assert fired(run) == [("fabric.setup", None), ("fabric.barrier", STEPS)]
    after = {
        "backward": Fabric.backward,
        "save": Fabric.save,
        "forward": _FabricModule.forward,
        "step": _FabricOptimizer.step,
        "autograd": torch.autograd.backward,
    }
    assert after == originals
    from torch.optim import optimizer

    assert not optimizer._global_optimizer_pre_hooks
    assert not optimizer._global_optimizer_post_hooks


# -- in a World: real 2-rank loops -----------------------------------------------------------
ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 30.0


def loop_target(name: str) -> str:
    return f"{ROOT}/tests/loop_targets.py:{name}"


@pytest.mark.slow
def test_a_plain_loops_caught_oom_is_found_and_named_with_its_step(world2: Any) -> None:
    """The bug a Trainer program's caught OOM has, in a plain DDP loop: the OOM fires at
    the loop's step 1 on rank 0, which catches it and skips; the verdict names it."""
    from chaoslight import judge

    schedule = Schedule.parse("oom@torch.backward rank=0 step=1")
    outcome = world2.run(loop_target("plain_caught_oom"), schedule, timeout=TIMEOUT)
    verdict = judge(outcome)
    assert verdict.failed, outcome.report()
    assert "rank 0 caught the injected oom@torch.backward rank=0 step=1" in verdict.reason
    assert ("torch.backward", 1) in [(e.site, e.step) for e in outcome.events if e.kind == FIRED]


@pytest.mark.slow
def test_a_fabric_loops_reach_and_a_frozen_rank_judged_as_a_trainers(world2: Any) -> None:
    """The baseline records a Fabric loop's reach (steps 0..3 at its forward, a loop); a
    rank frozen for good at its backward leaves its peer waiting in DDP's gradient
    all-reduce, which a correct program does: no finding."""
    from chaoslight import judge
    from chaoslight._search._reach import Reach

    baseline = world2.run(
        loop_target("fabric_train"), Schedule(), timeout=TIMEOUT, checks=[ReachRecorder()]
    )
    assert baseline.passed, baseline.report()
    reach = Reach.from_outcome(baseline)
    assert reach is not None and reach.loop
    steps = sorted(step for site, step in reach.points if site == "fabric.forward")
    assert steps == list(range(STEPS))
    assert "fabric.save" in reach.user

    frozen = Schedule.parse("freeze@fabric.backward rank=0 step=1")
    outcome = world2.run(loop_target("fabric_train"), frozen, timeout=TIMEOUT)
    verdict = judge(outcome)
    assert not verdict.failed, (verdict.reason, outcome.report())


def test_a_loop_campaign_says_which_checks_follow_a_trainer_and_judged_nothing() -> None:
    from chaoslight._runtime._protocol import check_from_name
    from chaoslight._search._coverage import coverage
    from chaoslight._search._reach import Reach

    loop_hooks = ("finite-loss", "data-order", "buffers-in-sync", "learned-invariants")
    names = ("disjoint-shards", "no-hang", *loop_hooks)
    checks = [check_from_name(name) for name in names]
    loop = coverage(Reach((("torch.backward", 0),), loop=True), [Schedule()], checks)
    line = loop.line()
    assert "no Trainer ran" in line and "disjoint-shards" in line
    unjudged = line.split("but", 1)[1]
    assert "no-hang" not in unjudged  # judged from the ranks' ends: it did
    for judged in loop_hooks:
        assert judged not in unjudged
    said = line.split("but", 1)[0]  # the checks that did judge the loop are named
    assert f"by {', '.join(loop_hooks)} at its steps" in said
    fit = coverage(Reach((("lightning.training_step", 0),)), [Schedule()], checks)
    assert "no Trainer ran" not in fit.line()


def test_fabric_sites_are_patched_in_both_namespaces_and_put_back() -> None:
    """``lightning.fabric`` and the standalone ``lightning_fabric`` are separate copies: a
    program on either is reached, and both come back as they were."""
    import wrapt

    spaces = [pytest.importorskip(name) for name in ("lightning.fabric", "lightning_fabric")]
    before = [vars(space.Fabric)["backward"] for space in spaces]
    with chaoslight.inject(Schedule([Delay(0.0, site="fabric.backward")])):
        during = [vars(space.Fabric)["backward"] for space in spaces]
        assert all(isinstance(method, wrapt.FunctionWrapper) for method in during)
    assert [vars(space.Fabric)["backward"] for space in spaces] == before


def loss_loop(bad_step: int, skip_bad: bool = False, bad_grad: bool = False) -> None:
    """A plain loop whose loss (or, with ``bad_grad``, one gradient) is NaN at
    ``bad_step``; with ``skip_bad`` it checks the loss and skips that optimizer step, as a
    correct program may."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(STEPS):
        loss = model(torch.ones(2, 3)).pow(2).mean()
        if step == bad_step and not bad_grad:
            loss = loss * float("nan")
        loss.backward()
        if step == bad_step and bad_grad:
            assert model.bias.grad is not None
            model.bias.grad.fill_(float("inf"))
        if skip_bad and not math.isfinite(loss.item()):
            opt.zero_grad()
            continue
        opt.step()
        opt.zero_grad()


@pytest.mark.parametrize("name", ["finite-loss", "finite-grads"])
def test_a_loop_that_steps_on_a_non_finite_value_is_judged_at_that_step(name: str) -> None:
    from chaoslight._runtime._protocol import check_from_name

    injection = chaoslight.inject(Schedule(), checks=[check_from_name(name)])
    with pytest.raises(chaoslight.CheckFailed) as failed, injection:
        loss_loop(bad_step=2, bad_grad=name == "finite-grads")
    (violation,) = failed.value.violations
    assert (violation.check, violation.step, violation.rank) == (name, 2, 0)
    expected = "the loss is nan" if name == "finite-loss" else "parameter 1 of the SGD optimizer"
    assert expected in violation.message


def test_a_loop_that_skips_the_step_of_a_non_finite_loss_passes() -> None:
    """The loss judged is the one the optimizer step applies: a loop that checks its loss
    and skips that step (as a GradScaler skips a step with non-finite gradients) is right."""
    from chaoslight._runtime._protocol import check_from_name

    checks = [check_from_name("finite-loss"), check_from_name("finite-grads")]
    with chaoslight.inject(Schedule(), checks=checks) as run:
        loss_loop(bad_step=1, skip_bad=True)
    assert run.violations == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("target", "apart_at"),
    [
        ("plain_ddp_loop", None),
        ("plain_skips_a_step_on_one_rank", 1),
        ("plain_local_sgd", None),  # its own comm hook: replicas apart by design
    ],
)
def test_replicas_of_a_ddp_loop_are_judged_after_each_optimizer_step(
    world2: Any, target: str, apart_at: int | None
) -> None:
    """In a plain DDP loop, replicas-in-sync compares the DDP modules' parameters after
    each optimizer step: a step skipped on one rank parts them at that step."""
    from chaoslight._runtime._protocol import check_from_name

    checks = [check_from_name("replicas-in-sync")]
    outcome = world2.run(loop_target(target), Schedule(), timeout=TIMEOUT, checks=checks)
    if apart_at is None:
        assert outcome.passed, outcome.report()
        return
    (violation,) = outcome.violations
    assert (violation.check, violation.step) == ("replicas-in-sync", apart_at), outcome.report()
    assert "differs between rank 0 and rank 1 after the optimizer step" in violation.message
    assert "after different numbers of backward passes (rank 0 2, rank 1 3)" in violation.cause


@pytest.mark.slow
@pytest.mark.parametrize(
    ("target", "unsynced"),
    [
        ("plain_batchnorm_broadcast", False),  # DDP broadcasts rank 0's at each forward
        ("plain_batchnorm_averaged", False),  # not broadcast, averaged before returning
        ("plain_batchnorm_unsynced", True),  # not broadcast, never averaged
    ],
)
def test_batchnorm_statistics_of_a_ddp_loop_are_judged_where_a_correct_loop_syncs_them(
    world2: Any, target: str, unsynced: bool
) -> None:
    """buffers-in-sync in a plain DDP loop: right after each of DDP's buffer broadcasts,
    or, with ``broadcast_buffers=False``, at the end of the loop."""
    from chaoslight._runtime._protocol import check_from_name

    checks = [check_from_name("buffers-in-sync")]
    outcome = world2.run(loop_target(target), Schedule(), timeout=TIMEOUT, checks=checks)
    points = {
        json.loads(e.detail).get("point")
        for e in outcome.events
        if e.kind == OBSERVATION and e.site == "buffers-in-sync"
    }
    assert points & {"forward", "end"}, outcome.report()  # it judged the loop
    if not unsynced:
        assert outcome.passed, outcome.report()
        return
    (violation,) = outcome.violations
    assert violation.check == "buffers-in-sync", outcome.report()
    assert "'1.running_mean' differs between rank 0 and rank 1" in violation.message
    assert "at the end of training" in violation.message
