"""Every fault kind in a real ``trainer.fit`` on CPU: where it fires, and what training sees."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from helpers import (
    FLAVOURS,
    SKIPPED_BATCH,
    at,
    changed,
    fit,
    patched_attributes,
    pl,
    tiny_loader,
    tiny_model,
    tiny_trainer,
)

import chaoslight
from chaoslight import OOM, Corrupt, Delay, DropSync, Raise, ReorderReduction, Schedule

# Ranks are read from $RANK and friends: none set, unless a test sets one.
pytestmark = pytest.mark.usefixtures("rank_env", "lightning_in_process")

OOM_PREFIX = "CUDA out of memory. Tried to allocate"
ENOSPC = OSError(28, "No space left on device")


def where(run: chaoslight.Run) -> list[tuple[str, int, int | None, int]]:
    """(site, rank, step, call #) of every firing, in order: the call's number as the
    fault's ``nth`` counts it (within the step, for a fault at a step)."""
    return [(e.site, e.rank, e.step, e.call) for e in run.fired()]


def recorder(flavour: str = "lightning.pytorch") -> Any:
    """A user Callback that times on_train_batch_start/end and keeps each step's loss."""

    class Recorder(pl(flavour).Callback):
        def __init__(self) -> None:
            self.started: dict[int, float] = {}
            self.durations: dict[int, float] = {}
            self.losses: dict[int, torch.Tensor] = {}

        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, idx: int) -> None:
            self.started[trainer.fit_loop.total_batch_idx] = time.monotonic()

        def on_train_batch_end(
            self, trainer: Any, module: Any, outputs: Any, batch: Any, idx: int
        ) -> None:
            step = trainer.fit_loop.total_batch_idx
            self.durations[step] = time.monotonic() - self.started[step]
            self.losses[step] = outputs["loss"].detach().clone()

    return Recorder()


# -- OOM -----------------------------------------------------------------------------------


@pytest.mark.filterwarnings(SKIPPED_BATCH)
def test_oom_at_forward_reaches_the_users_handler() -> None:
    """OOM at lightning.forward is caught by the user's except around self(x), at that step."""
    model = tiny_model(catch_forward=True)
    with chaoslight.inject(OOM(site="lightning.forward", step=2)) as run:
        fit(model, max_steps=5)
    assert where(run) == [("lightning.forward", 0, 2, 1)]
    assert [step for step, _ in model.caught] == [2]
    assert model.caught[0][1].startswith(OOM_PREFIX)
    assert [step for step, _ in model.losses] == [0, 1, 3, 4]  # training went on


def test_oom_at_training_step_propagates_out_of_fit() -> None:
    """OOM at lightning.training_step escapes fit; the handler around the forward never runs."""
    model = tiny_model(catch_forward=True)
    with (
        chaoslight.inject(OOM(site="lightning.training_step", step=1, nbytes=3 * 2**20)) as run,
        pytest.raises(torch.OutOfMemoryError) as caught,
    ):
        fit(model, max_steps=5)
    assert str(caught.value).startswith(f"{OOM_PREFIX} 3.00 MiB. GPU 0 ")
    assert where(run) == [("lightning.training_step", 0, 1, 1)]
    assert model.caught == []
    assert [step for step, _ in model.batches] == [0]  # step 1's training_step never began


def test_deferred_oom_surfaces_at_the_next_sync_point() -> None:
    """OOM(deferred=True) passes the site and is raised by the next loss.item() instead."""
    model = tiny_model(catch_forward=True, item_loss=True)
    with (
        chaoslight.inject(OOM(site="lightning.forward", step=2, deferred=True)) as run,
        pytest.raises(torch.OutOfMemoryError, match=OOM_PREFIX),
    ):
        fit(model, max_steps=5)
    assert model.caught == []  # not at the forward...
    assert [step for step, _ in model.losses] == [0, 1, 2]  # ...which returned at step 2,
    assert [step for step, _ in model.items] == [0, 1]  # ...but at step 2's loss.item()
    assert [(e.kind, e.site, e.step) for e in run.events] == [
        ("fired", "lightning.forward", 2),
        ("surfaced", "sync", 2),
    ]


def test_deferred_oom_surfaces_at_cuda_synchronize() -> None:
    """A deferred OOM lets its call finish, then torch.cuda.synchronize raises it."""
    buffer = io.BytesIO()
    with chaoslight.inject(OOM(site="torch.save", deferred=True)) as run:
        torch.save({"w": torch.ones(3)}, buffer)
        with pytest.raises(torch.OutOfMemoryError, match=OOM_PREFIX):
            torch.cuda.synchronize()
    buffer.seek(0)
    assert torch.equal(torch.load(buffer)["w"], torch.ones(3))
    assert [e.kind for e in run.events] == ["fired", "surfaced"]


def test_deferred_oom_never_surfaced_is_noted() -> None:
    """A deferred OOM with no sync point before the block ends is reported, not lost."""
    with chaoslight.inject(OOM(site="torch.save", deferred=True)) as run:
        torch.save(1, io.BytesIO())
    assert [e.kind for e in run.events] == ["fired", "note"]
    assert "never surfaced" in run.events[1].detail


# -- Delay ---------------------------------------------------------------------------------


def test_delay_sleeps_on_exactly_the_triggered_step() -> None:
    """Delay(0.3) at training_step step=2 makes that step, and no other, take >= 0.3 s."""
    seconds = 0.3
    callback = recorder()
    with chaoslight.inject(Delay(seconds, site="lightning.training_step", step=2)) as run:
        fit(max_steps=5, callbacks=[callback])
    assert where(run) == [("lightning.training_step", 0, 2, 1)]
    assert callback.durations[2] >= seconds
    assert all(callback.durations[s] < seconds for s in (0, 1, 3, 4)), callback.durations


# -- Corrupt -------------------------------------------------------------------------------


def test_corrupt_nan_loss_poisons_parameters_after_that_step() -> None:
    """A NaN training_step loss is what Lightning sees that step; parameters are NaN after it."""
    model = tiny_model()
    callback = recorder()
    with chaoslight.inject(Corrupt(site="lightning.training_step", value="nan", step=2)) as run:
        fit(model, max_steps=5, callbacks=[callback])
    assert where(run) == [("lightning.training_step", 0, 2, 1)]
    assert [bool(torch.isnan(callback.losses[s])) for s in range(5)] == [0, 0, 1, 1, 1]
    assert all(torch.isfinite(loss).all() for loss in at(model.losses, 2))  # model's own
    finite = [bool(torch.isfinite(p).all()) for _, p in model.params]
    assert finite == [True, True, True, False, False]  # params at the start of each step
    assert all(torch.isnan(p).all() for _, p in model.params[3:])


@pytest.mark.parametrize("value", ["inf", "-inf"])
def test_corrupt_inf_at_forward_reaches_the_loss(value: str) -> None:
    """Corrupt(value=inf) at lightning.forward gives an infinite output, and loss, that step."""
    model = tiny_model()
    with chaoslight.inject(Corrupt(site="lightning.forward", value=value, step=1)) as run:
        fit(model, max_steps=2)
    assert where(run) == [("lightning.forward", 0, 1, 1)]
    assert [bool(torch.isinf(loss)) for _, loss in model.losses] == [False, True]


class Unsized(torch.utils.data.IterableDataset):
    """The batches of a loader, with no length: Lightning prefetches a batch ahead."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __iter__(self) -> Any:
        return iter(self.loader)


@pytest.mark.parametrize(
    ("sized", "step"),
    [(True, 0), (True, 2), (True, 3), (True, 5), (False, 0), (False, 2), (False, 4)],
    # Not (False, 3): without a length, the fetch that finds epoch 0 exhausted is counted
    # as a call at step 3 too, and uses up the fault (a known limitation).
)
def test_corrupt_next_batch_poisons_the_batch_of_that_step(sized: bool, step: int) -> None:
    """Corrupt at lightning.next_batch step=N poisons the float batch training sees at step N."""
    model = tiny_model()
    loader = tiny_loader(batches=3)  # 7 steps: three epochs
    if not sized:
        loader = torch.utils.data.DataLoader(Unsized(loader), batch_size=None)
    with chaoslight.inject(Corrupt(site="lightning.next_batch", step=step)) as run:
        fit(model, max_steps=7, loader=loader)
    assert [(e.site, e.step) for e in run.fired()] == [("lightning.next_batch", step)]
    poisoned = [s for s, x in model.batches if torch.isnan(x).all()]
    assert poisoned == [step]
    assert all(torch.isfinite(x).all() for s, x in model.batches if s != step)


# -- Raise ---------------------------------------------------------------------------------


@pytest.mark.parametrize("site", ["lightning.save_checkpoint", "torch.save"])
def test_enospc_while_checkpointing_propagates_out_of_fit(site: str, tmp_path: Path) -> None:
    """Raise(OSError 28) at a checkpoint write escapes fit with errno 28; no checkpoint is left."""
    with (
        chaoslight.inject(Raise(ENOSPC, site=site)) as run,
        pytest.raises(OSError) as caught,
    ):
        fit(max_steps=2, enable_checkpointing=True, default_root_dir=tmp_path)
    assert caught.value.errno == 28
    assert caught.value.strerror == "No space left on device"
    assert where(run) == [(site, 0, 1, 1)]
    assert list(tmp_path.rglob("*.ckpt")) == []


def test_enospc_at_torch_save_leaves_a_half_written_file(tmp_path: Path) -> None:
    """A Raise at torch.save leaves a truncated file that torch.load cannot read, for as
    long as the run lasts (tests/test_user_files.py: it is undone afterwards)."""
    state = {"w": torch.randn(1000)}
    full, half = tmp_path / "full.pt", tmp_path / "half.pt"
    torch.save(state, full)
    with chaoslight.inject(Raise(ENOSPC, site="torch.save")) as run:
        with pytest.raises(OSError) as caught:
            torch.save(state, half)
        assert half.exists()
        assert 0 < half.stat().st_size < full.stat().st_size
        with pytest.raises(RuntimeError):
            torch.load(half)
    assert caught.value.errno == 28
    assert where(run) == [("torch.save", 0, None, 1)]
    assert torch.equal(torch.load(full)["w"], state["w"])


def test_enospc_at_lightning_save_checkpoint_from_user_call(tmp_path: Path) -> None:
    """Raise at lightning.save_checkpoint escapes the user's trainer.save_checkpoint call."""
    trainer = tiny_trainer(max_steps=1)
    trainer.fit(tiny_model(), tiny_loader())
    path = tmp_path / "manual.ckpt"
    with (
        chaoslight.inject(Raise(ENOSPC, site="lightning.save_checkpoint")) as run,
        pytest.raises(OSError) as caught,
    ):
        trainer.save_checkpoint(path)
    assert caught.value.errno == 28
    assert [e.site for e in run.fired()] == ["lightning.save_checkpoint"]
    assert not path.exists()
    trainer.save_checkpoint(path)  # restored: the next save works
    assert path.exists()


# -- DropSync ------------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_drop_sync_makes_cuda_synchronize_a_no_op() -> None:
    """DropSync at cuda.synchronize returns None where CPU-only torch would raise."""
    with pytest.raises((AssertionError, RuntimeError)):
        torch.cuda.synchronize()
    with chaoslight.inject(DropSync(site="cuda.synchronize", times=2)) as run:
        assert torch.cuda.synchronize() is None
        assert torch.cuda.synchronize() is None
        with pytest.raises((AssertionError, RuntimeError)):
            torch.cuda.synchronize()  # times=2: the third call is real
    assert where(run) == [("cuda.synchronize", 0, None, 1), ("cuda.synchronize", 0, None, 2)]


def _collectives_run(group: Any) -> int:
    """How many collectives the process group has run (its sequence number)."""
    return int(group._get_sequence_number_for_group())


def test_drop_sync_skips_barrier_and_all_reduce_in_a_gloo_group(gloo_group: Any) -> None:
    """DropSync skips the collective itself: None back, tensor untouched, no collective run."""
    tensor = torch.tensor([1.0, 2.0])
    before = _collectives_run(gloo_group)
    faults = [DropSync(site="dist.barrier"), DropSync(site="dist.all_reduce", times=2)]
    with chaoslight.inject(faults) as run:
        assert dist.barrier() is None
        assert dist.all_reduce(tensor) is None
        work = dist.all_reduce(tensor, async_op=True)
        assert work.is_completed() and work.wait() is True
        assert work.get_future().wait() is None
        assert _collectives_run(gloo_group) == before
        assert dist.all_reduce(tensor) is None  # times=2: the third call is real
        assert _collectives_run(gloo_group) == before + 1
    assert torch.equal(tensor, torch.tensor([1.0, 2.0]))
    assert where(run) == [
        ("dist.barrier", 0, None, 1),
        ("dist.all_reduce", 0, None, 1),
        ("dist.all_reduce", 0, None, 2),
    ]
    real = dist.all_reduce(tensor, async_op=True)  # a real one, for comparison
    real.wait()
    assert type(real) is not type(work)
    assert _collectives_run(gloo_group) == before + 2


def test_broadcast_object_list_goes_through_the_broadcast_site(gloo_group: Any) -> None:
    """torch's broadcast_object_list calls c10d's module-global broadcast: the site sees it."""
    objects = [{"epoch": 3}]
    with chaoslight.inject(Delay(0, site="dist.broadcast", times=None)) as run:
        dist.broadcast_object_list(objects, src=0)
    assert objects == [{"epoch": 3}]
    assert [e.site for e in run.fired()] == ["dist.broadcast", "dist.broadcast"]  # size, data


@pytest.mark.parametrize("log_sync", [True, False])
def test_lightning_log_sync_dist_reaches_all_reduce(gloo_group: Any, log_sync: bool) -> None:
    """self.log(sync_dist=True) under DDP all-reduces through the dist.all_reduce site."""
    model = tiny_model(log_sync=log_sync)
    with chaoslight.inject(Delay(0, site="dist.all_reduce", times=None)) as run:
        fit(model, max_steps=3, strategy="ddp")
    training_steps = [e.step for e in run.fired() if e.step is not None]
    assert training_steps == ([0, 1, 2] if log_sync else [])


def test_reorder_compressed_rounds_lightnings_reduce_at_its_step(gloo_group: Any) -> None:
    """ReorderReduction(compressed) at dist.all_reduce rounds strategy.reduce to bf16 at step 1."""
    third = torch.tensor(1 / 3)
    reduced: list[tuple[int, float]] = []

    def reduce_a_third(model: Any, step: int) -> None:
        reduced.append((step, float(model.trainer.strategy.reduce(third.clone()))))

    fault = ReorderReduction(site="dist.all_reduce", order="compressed", step=1)
    with chaoslight.inject(fault) as run:
        fit(tiny_model(step_hook=reduce_a_third), max_steps=3, strategy="ddp")
    rounded = float(third.to(torch.bfloat16).float())
    assert rounded != float(third)
    assert reduced == [(0, float(third)), (1, rounded), (2, float(third))]
    assert [(e.site, e.step) for e in run.fired()] == [("dist.all_reduce", 1)]


# -- Crash ---------------------------------------------------------------------------------

CRASHING_FIT = """
import sys
sys.path.insert(0, {tests!r})
import chaoslight
from helpers import fit, tiny_model

def announce(model, step):
    print("step", step, flush=True)

schedule = chaoslight.Crash(site="lightning.training_step", step=2)
with chaoslight.inject(schedule, events_file={events!r}, allow_crash=True):
    fit(tiny_model(step_hook=announce), max_steps=5)
print("survived", flush=True)
"""


@pytest.mark.slow
def test_crash_kills_the_process_and_leaves_its_event_log(tmp_path: Path) -> None:
    """Crash SIGKILLs the process at its step; the events file already holds the firing."""
    events = tmp_path / "events.jsonl"
    code = CRASHING_FIT.format(tests=str(Path(__file__).parent), events=str(events))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK")}
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert result.returncode == -9, result.stderr
    assert result.stdout.split("\n") == ["step 0", "step 1", ""]
    logged = [json.loads(line) for line in events.read_text().splitlines()]
    assert [(e["kind"], e["site"], e["step"], e["call"]) for e in logged] == [
        ("fired", "lightning.training_step", 2, 1)
    ]
    assert logged[0]["fault"] == "crash@lightning.training_step step=2"


def test_events_file_holds_every_event_as_it_happens(tmp_path: Path) -> None:
    """events_file appends each event as one JSON line, the same events the Run reports."""
    events = tmp_path / "events.jsonl"
    events.write_text("")
    schedule = Schedule([Delay(0, site="lightning.training_step", times=None)])
    with chaoslight.inject(schedule, events_file=events) as run:
        fit(max_steps=3)
        assert len(events.read_text().splitlines()) == 3  # already written, not at exit
    from chaoslight._runtime._events import from_jsonl

    assert from_jsonl(events.read_text()) == run.events
    assert run.to_jsonl() == events.read_text()


# -- hooks and both Lightning flavours -----------------------------------------------------


def test_delay_at_a_callback_hook_runs_before_the_users_callback() -> None:
    """Delay at on_train_batch_end holds up the user's on_train_batch_end by that much."""
    seconds = 0.3
    callback = recorder()
    fault = Delay(seconds, site="lightning.on_train_batch_end", step=1)
    with chaoslight.inject(fault) as run:
        fit(max_steps=3, callbacks=[callback])
    assert where(run) == [("lightning.on_train_batch_end", 0, 1, 1)]
    assert callback.durations[1] >= seconds
    assert callback.durations[0] < seconds and callback.durations[2] < seconds


def test_raise_at_a_callback_hook_stops_fit_before_the_users_callback() -> None:
    """Raise at on_train_batch_end escapes fit; the user's hook never sees that step."""
    callback = recorder()
    fault = Raise(RuntimeError("hook failed"), site="lightning.on_train_batch_end", step=1)
    with chaoslight.inject(fault) as run, pytest.raises(RuntimeError, match="hook failed"):
        fit(max_steps=3, callbacks=[callback])
    assert where(run) == [("lightning.on_train_batch_end", 0, 1, 1)]
    assert sorted(callback.durations) == [0]
    assert sorted(callback.started) == [0, 1]


HOOK_SITES = {
    # site: the steps it fires at (times=None) in 4 training steps, validating after 2 and 4
    "lightning.training_step": [0, 1, 2, 3],
    "lightning.forward": [0, 1, 2, 3],
    "lightning.backward": [0, 1, 2, 3],
    "lightning.optimizer_step": [0, 1, 2, 3],
    "lightning.on_before_optimizer_step": [0, 1, 2, 3],
    "lightning.on_train_batch_end": [0, 1, 2, 3],
    "lightning.validation_step": [1, 1, 3, 3],
    "lightning.on_validation_end": [1, 3],
    "lightning.on_train_start": [None],
    "lightning.on_fit_start": [None],
    "lightning.on_train_end": [3],
}


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_lightning_sites_fire_in_both_flavours(flavour: str) -> None:
    """Steps, hooks, backward and optimizer_step fire at their steps in either Lightning."""
    model = tiny_model(flavour, validate=True)
    faults = [Delay(0, site=site, times=None) for site in HOOK_SITES]
    with chaoslight.inject(faults) as run:
        fit(
            model,
            flavour,
            max_steps=4,
            val_loader=tiny_loader(batches=2),
            limit_val_batches=2,
            val_check_interval=2,
        )
    steps = {site: [e.step for e in run.fired(site)] for site in HOOK_SITES}
    assert steps == HOOK_SITES
    assert model.validated == [(1, 0), (1, 1), (3, 0), (3, 1)]


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize(
    ("site", "began"),
    [
        # Lightning calls optimizer_step with a closure that runs training_step and backward,
        # so a Raise there comes before step 2's training_step; backward comes after it.
        ("lightning.optimizer_step", [0, 1]),
        ("lightning.backward", [0, 1, 2]),
    ],
)
def test_raise_at_optimizer_step_or_backward_escapes_fit(
    flavour: str, site: str, began: list[int]
) -> None:
    """A Raise at lightning.optimizer_step or lightning.backward stops fit at that step."""
    model = tiny_model(flavour)
    fault = Raise(ArithmeticError(site), site=site, step=2)
    with chaoslight.inject(fault) as run, pytest.raises(ArithmeticError, match=site):
        fit(model, flavour, max_steps=4)
    assert where(run) == [(site, 0, 2, 1)]
    assert [step for step, _ in model.params] == began


# -- ChaosCallback -------------------------------------------------------------------------


@pytest.mark.filterwarnings(SKIPPED_BATCH)
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_chaos_callback_fires_the_schedule_and_restores(flavour: str) -> None:
    """ChaosCallback in Trainer(callbacks=...) fires the faults, then restores every patch."""
    before = patched_attributes()
    callback = chaoslight.ChaosCallback(
        [OOM(site="lightning.forward", step=1), Delay(0, site="lightning.backward", step=2)]
    )
    assert isinstance(callback, pl(flavour).Callback)
    model = tiny_model(flavour, catch_forward=True)
    fit(model, flavour, max_steps=4, callbacks=[callback])
    assert where(callback.run) == [
        ("lightning.forward", 0, 1, 1),
        ("lightning.backward", 0, 2, 1),  # its first call at step 2
    ]
    assert [step for step, _ in model.caught] == [1]
    assert chaoslight._runtime._inject.active() is None
    assert changed(before, patched_attributes()) == []


def test_chaos_callback_restores_when_fit_raises() -> None:
    """When a fault makes fit raise, ChaosCallback still undoes every patch."""
    before = patched_attributes()
    callback = chaoslight.ChaosCallback(Raise(ENOSPC, site="lightning.training_step", step=1))
    with pytest.raises(OSError) as caught:
        fit(max_steps=4, callbacks=[callback])
    assert caught.value.errno == 28
    assert where(callback.run) == [("lightning.training_step", 0, 1, 1)]
    assert chaoslight._runtime._inject.active() is None
    assert changed(before, patched_attributes()) == []
    fit(max_steps=2)  # and training works normally afterwards


class Verdicts:
    """A check that keeps how each rank ended, as its judge was shown it."""

    name = "verdicts"

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def observer(self) -> None:
        return None

    def judge(self, evidence: Any) -> list[Any]:
        self.seen = [
            (v.status, v.exception_type, v.exception_message) for v in evidence.ranks.values()
        ]
        return []


def failing_step(model: Any, step: int) -> None:
    """A training_step that fails at step 1, as a user's bug would."""
    if step == 1:
        raise KeyError("user bug at step 1")


def test_chaos_callback_judges_a_failed_fit_as_failed() -> None:
    """A fit that raises is judged as failed (with its error), and its error propagates."""
    verdicts = Verdicts()
    callback = chaoslight.ChaosCallback(Delay(0, site="lightning.backward"), checks=[verdicts])
    with pytest.raises(KeyError, match="user bug at step 1"):
        fit(tiny_model(step_hook=failing_step), max_steps=4, callbacks=[callback])
    assert verdicts.seen == [("failed", "KeyError", "'user bug at step 1'")]
    assert chaoslight._runtime._inject.active() is None


def test_chaos_callback_judges_a_passing_fit_as_passed() -> None:
    """A fit that completes is judged as passed."""
    verdicts = Verdicts()
    callback = chaoslight.ChaosCallback(Delay(0, site="lightning.backward"), checks=[verdicts])
    fit(max_steps=2, callbacks=[callback])
    assert verdicts.seen == [("passed", "", "")]


class ExitFails(Verdicts):
    """Verdicts, with an exit() that raises."""

    def exit(self) -> None:
        raise RuntimeError("check exit failed")


def test_chaos_callback_never_masks_the_fits_error() -> None:
    """When a check's exit() also fails, the fit's own error still propagates, with a note."""
    before = patched_attributes()
    callback = chaoslight.ChaosCallback(Delay(0, site="lightning.backward"), checks=[ExitFails()])
    with pytest.raises(KeyError, match="user bug at step 1") as caught:
        fit(tiny_model(step_hook=failing_step), max_steps=4, callbacks=[callback])
    if sys.version_info >= (3, 11):
        assert "RuntimeError: check exit failed" in "".join(caught.value.__notes__)
    assert chaoslight._runtime._inject.active() is None
    assert changed(before, patched_attributes()) == []


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_manual_backward_goes_through_the_backward_site(flavour: str) -> None:
    """Under manual optimization Lightning's manual_backward bypasses the strategy-hook
    dispatcher; an OOM at lightning.backward still fires there, at the step named."""

    class Manual(pl(flavour).LightningModule):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            optimizer = self.optimizers()
            optimizer.zero_grad()
            self.manual_backward(torch.nn.functional.mse_loss(self.layer(x), y))
            optimizer.step()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    with (
        pytest.raises(torch.OutOfMemoryError),
        chaoslight.inject("oom@lightning.backward step=2") as run,
    ):
        fit(Manual(), flavour)
    assert where(run) == [("lightning.backward", 0, 2, 1)]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_datamodules_setup_goes_through_the_setup_site(flavour: str) -> None:
    """Lightning calls a LightningDataModule's hooks through their own dispatcher, before
    the callbacks' setup: lightning.setup's first call is the datamodule's."""
    ran: list[str] = []

    class Data(pl(flavour).LightningDataModule):  # type: ignore[misc, name-defined]
        def setup(self, stage: str) -> None:
            ran.append(stage)

        def train_dataloader(self) -> Any:
            return tiny_loader()

    with (
        pytest.raises(OSError, match="No space left"),
        chaoslight.inject(Raise(ENOSPC, site="lightning.setup", nth=1)) as run,
    ):
        tiny_trainer(flavour, max_steps=2).fit(tiny_model(flavour), datamodule=Data())
    assert ran == [] and [e.site for e in run.fired()] == ["lightning.setup"]
    with chaoslight.inject(Schedule()) as clean:
        tiny_trainer(flavour, max_steps=2).fit(tiny_model(flavour), datamodule=Data())
    assert ran == ["fit"] and clean.fired() == []
