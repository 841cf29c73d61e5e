"""The faults that damage data instead of raising: a flipped bit (silent data corruption),
a batch read twice or lost (a flaky storage read), a checkpoint that reads back damaged.

Each has its text form, its one-line validation errors, its traits (how the oracle
judges it, whether the default search draws it), an action that does what it says at
its site, and the data checks do not blame the program for what the fault did.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import find, settings
from torch.utils.data import DataLoader, TensorDataset

import chaoslight
from chaoslight import BadCheckpoint, DropBatch, Event, Flip, RepeatBatch, Schedule, judge
from chaoslight._runtime._events import FIRED
from chaoslight._runtime._evidence import OBSERVATION
from chaoslight._schedule import Severity
from chaoslight._search._data_strategies import bad_checkpoints, flips, repeated_batches
from chaoslight._search._inprocess import run_in_process
from chaoslight._verdict._oracle import HANG_RULE
from chaoslight.checks import DataOrder, DisjointShards, Evidence, FiniteLoss
from chaoslight.strategies import DEFAULT_KINDS

pl = pytest.importorskip("lightning.pytorch")
pytestmark = pytest.mark.usefixtures("lightning_in_process")  # single-process fits


class Recorder(pl.LightningModule):  # type: ignore[misc]
    """A one-layer regressor that records the sample ids of every batch it trains on."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.trained: list[list[int]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, ids = batch
        self.trained.append(ids.tolist())
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def train(module: Recorder, epochs: int = 1, root: Path | None = None, **fit: Any) -> Any:
    """One single-process fit of 6 batches an epoch; the trainer."""
    pl.seed_everything(0, verbose=False)
    x = torch.randn(12, 2, generator=torch.Generator().manual_seed(0))
    data = TensorDataset(x, x.sum(1, keepdim=True), torch.arange(12))
    trainer = pl.Trainer(
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
    )
    trainer.fit(module, DataLoader(data, batch_size=2), **fit)
    return trainer


def fit(schedule: str) -> tuple[Recorder, Any]:
    """``train`` under ``schedule``: the module (its weights drawn from seed 0, whatever
    ran before it in this process), the run."""
    torch.manual_seed(0)
    module = Recorder()
    with chaoslight.inject(schedule) as run:
        train(module)
    return module, run


def firsts(module: Recorder) -> list[int]:
    """The first sample id of each batch trained on, in order."""
    return [ids[0] for ids in module.trained]


# -- the kinds as data --------------------------------------------------------------------


def test_the_new_kinds_round_trip_through_their_text_and_json_forms() -> None:
    """Each kind writes and reads back its parameters; defaults are left out of the text."""
    text = (
        "flip@lightning.on_before_optimizer_step rank=1 step=3 target=grad index=5 bit=sign\n"
        "repeat_batch@lightning.next_batch rank=0 step=2\n"
        "drop_batch@lightning.next_batch rank=1 step=4\n"
        "bad_checkpoint@lightning.load_checkpoint rank=0 effect=empty"
    )
    schedule = Schedule.parse(text)
    assert schedule.to_text() == text
    assert Schedule.from_json(schedule.to_json()) == schedule
    assert str(Flip(site="lightning.forward")) == "flip@lightning.forward"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("flip@lightning.forward target=weights", "target='weights' is not one of param, grad"),
        ("flip@lightning.forward bit=31", "bit=31 is not one of exponent, sign"),
        ("flip@lightning.forward index=-1", "index=-1 must not be negative"),
        ("repeat_batch@lightning.forward", "needs a batches site (lightning.next_batch"),
        ("drop_batch@torch.load", "needs a batches site"),
        ("bad_checkpoint@torch.load effect=gone", "effect='gone' is not one of truncated, empty"),
        (
            "bad_checkpoint@torch.save",
            "needs a load site (fabric.load, lightning.load_checkpoint, torch.load",
        ),
    ],
)
def test_a_bad_parameter_is_refused_in_one_line_naming_it(text: str, message: str) -> None:
    """A wrong value fails where the schedule is read, naming the field, value and fix."""
    with pytest.raises(chaoslight.InvalidSchedule, match=message.replace("(", r"\(")) as raised:
        Schedule.parse(text)
    assert "\n" not in str(raised.value)


def test_each_kind_declares_the_class_the_oracle_documents() -> None:
    """A flip and a lost batch are desyncs, a repeated batch and a damaged checkpoint are
    hard; the default search draws all but the lost batch, which no correct program
    survives."""
    assert Flip(site="lightning.forward").fault_class() == Severity.DESYNC
    assert DropBatch(site="lightning.next_batch").fault_class() == Severity.DESYNC
    assert RepeatBatch(site="lightning.next_batch").fault_class() == Severity.HARD
    assert BadCheckpoint(site="torch.load").fault_class() == Severity.HARD
    assert {"flip", "repeat_batch", "bad_checkpoint"} <= set(DEFAULT_KINDS)
    assert "drop_batch" not in DEFAULT_KINDS
    assert RepeatBatch.alters_data and DropBatch.alters_data and Flip.silent


def test_the_strategies_draw_at_their_sites_and_shrink_to_the_simplest() -> None:
    """A flip shrinks to a parameter's exponent bit; data faults are drawn at the batch
    fetch only, checkpoint faults at the loads only."""
    quiet = settings(database=None)
    assert str(find(flips(), lambda f: True, settings=quiet)) == (
        "flip@lightning.on_before_optimizer_step rank=0 step=0"
    )
    sites = {find(repeated_batches(), lambda f: True, settings=quiet).site}
    assert sites == {"lightning.next_batch"}
    drawn = find(bad_checkpoints(), lambda f: f.site == "torch.load", settings=quiet)
    assert drawn.effect == "truncated"


# -- what each does at its site -----------------------------------------------------------


def test_a_flip_changes_one_element_by_its_exponent_bit_and_says_which() -> None:
    """The flipped parameter element grows by 2**128 (or, from [1, 2), turns Inf or
    NaN); the event log names it, before and
    after; every other element is untouched by the flip itself."""
    module, run = fit("flip@lightning.on_train_batch_end step=5 target=param index=1")
    (note,) = [e.detail for e in run.events if e.detail.startswith("flipped")]
    assert note.startswith("flipped the exponent bit of element 1 of layer.weight:")
    flipped = float(module.layer.weight.detach()[0, 1])
    assert not math.isfinite(flipped) or abs(flipped) > 1e30  # 2**128 times, or Inf/NaN
    assert abs(float(module.layer.weight.detach()[0, 0])) < 10


def test_a_flip_picks_the_same_element_in_every_replay() -> None:
    """The element is a function of the fault's numbers only: two runs note the same change."""
    notes = []
    for _ in range(2):
        _, run = fit("flip@lightning.on_before_optimizer_step step=2 target=grad tensor=9 index=7")
        notes.append([e.detail for e in run.events if e.detail.startswith("flipped")])
    assert notes[0] == notes[1] and "of layer.bias.grad" in notes[0][0]


def test_a_flip_of_missing_optimizer_state_says_nothing_was_flipped() -> None:
    """Before the first step SGD has no momentum yet: nothing to flip, and the log says so."""
    _, run = fit("flip@lightning.on_before_optimizer_step step=0 target=optimizer_state")
    assert any("nothing flipped" in e.detail for e in run.events)


def test_a_repeated_batch_is_trained_on_twice_and_the_next_one_is_lost() -> None:
    """The batch of step 2 (samples 4, 5) again at step 3; batch 6, 7 is never trained on;
    the epoch keeps its length. At the epoch's last batch nothing repeats."""
    module, _ = fit("repeat_batch@lightning.next_batch step=2")
    assert firsts(module) == [0, 2, 4, 4, 8, 10]
    module, _ = fit("repeat_batch@lightning.next_batch step=5")
    assert firsts(module) == [0, 2, 4, 6, 8, 10]


def test_a_dropped_batch_shortens_the_epoch_by_one() -> None:
    """The batch of step 2 is lost and the next takes its place; the epoch has 5 batches."""
    module, _ = fit("drop_batch@lightning.next_batch step=2")
    assert firsts(module) == [0, 2, 6, 8, 10]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    ("effect", "error"),
    [("truncated", RuntimeError), ("empty", EOFError), ("missing", FileNotFoundError)],
)
def test_a_damaged_checkpoint_load_raises_what_torch_raises_and_leaves_the_file(
    tmp_path: Path, effect: str, error: type[BaseException]
) -> None:
    """torch.load of a path and of an open file sees the damage; the file is untouched and
    loads whole once the fault has fired."""
    path = tmp_path / "last.ckpt"
    torch.save({"w": torch.arange(100.0)}, path)
    before = _sha(path)
    with chaoslight.inject(f"bad_checkpoint@torch.load effect={effect} times=2"):
        with pytest.raises(error):
            torch.load(path)
        with open(path, "rb") as handle, pytest.raises(error):
            torch.load(handle)
        assert torch.load(path)["w"].sum() == 4950
    assert _sha(path) == before


def test_a_damaged_resume_fails_lightnings_load_and_keeps_the_checkpoint(tmp_path: Path) -> None:
    """A fit resuming from a truncated checkpoint raises the zip reader's error from
    Lightning's own load; the checkpoint on disk is the one that was saved."""
    trainer = train(Recorder(), root=tmp_path)
    path = tmp_path / "last.ckpt"
    trainer.save_checkpoint(path)
    before = _sha(path)
    damaged = chaoslight.inject("bad_checkpoint@lightning.load_checkpoint")
    with damaged, pytest.raises(RuntimeError, match="PytorchStreamReader failed"):
        train(Recorder(), epochs=2, root=tmp_path, ckpt_path=str(path))
    assert _sha(path) == before


# -- what the oracle and the data checks make of them ------------------------------------


def test_an_absorbed_flip_is_noted_undetected_never_failed() -> None:
    """A sign flip of a bias after the last step leaves no trace: the verdict passes and
    notes the flip went undetected, naming the element it changed."""
    text = "flip@lightning.on_train_batch_end step=5 target=param tensor=1 bit=sign"
    verdict = judge(run_in_process(lambda: train(Recorder()), Schedule.parse(text), [FiniteLoss()]))
    assert verdict.fired, "the flip fired"
    assert not verdict.failed and verdict.rule == HANG_RULE
    (note,) = [n for n in verdict.notes if "went undetected" in n]
    assert "of layer.bias" in note


def test_a_flip_that_shows_is_noted_with_what_saw_it() -> None:
    """An exponent flip before a step makes the next loss Inf: the note names finite-loss."""
    schedule = Schedule.parse("flip@lightning.on_before_optimizer_step step=2 target=param")
    verdict = judge(run_in_process(lambda: train(Recorder()), schedule, [FiniteLoss()]))
    assert not verdict.failed
    (note,) = [n for n in verdict.notes if n.startswith("flip@")]
    assert "was seen: finite-loss" in note


def _observation(check: str, rank: int, step: int, facts: dict[str, Any]) -> Event:
    return Event(OBSERVATION, check, rank, step, 0.0, 0.0, detail=json.dumps(facts))


def _fired(fault: str, rank: int, step: int) -> Event:
    return Event(FIRED, "lightning.next_batch", rank, step, 0.0, 0.0, fault=fault)


def test_disjoint_shards_does_not_count_batches_a_fault_lost() -> None:
    """Rank 1 saw one batch fewer because a fault lost it: not the program's sharding."""
    check = DisjointShards()
    events = []
    for rank, batches in {0: [[1], [2]], 1: [[3]]}.items():
        for step, rows in enumerate(batches):
            events.append(
                _observation(check.name, rank, step, {"fit": 0, "epoch": 0, "rows": rows})
            )
        events.append(_observation(check.name, rank, 2, {"fit": 0, "epoch": 0, "end": 1}))
    assert check.judge(Evidence(events)) != []  # without the fault: uneven counts
    lost = _fired("drop_batch@lightning.next_batch rank=1 step=0", 1, 0)
    assert check.judge(Evidence([*events, lost])) == []


def test_data_order_does_not_read_an_order_a_fault_changed() -> None:
    """Two epochs with the same batch stream are a lost reshuffle, unless a fault repeated
    a batch in them: the stream is then the fault's."""
    check = DataOrder()
    facts = {"samplers": [], "promises": ["ShuffledBatches"], "replaced": None}
    stream = list(range(12))
    events = []
    for epoch in (0, 1):
        for rank in (0, 1):
            loaders = {"fit": 0, "epoch": epoch, "loaders": [facts], "world_size": 2}
            events.append(_observation(check.name, rank, 0, loaders))
            batches = {"fit": 0, "epoch": epoch, "batches": stream}
            events.append(_observation(check.name, rank, 11, batches))
    assert check.judge(Evidence(events)) != []
    repeated = _fired("repeat_batch@lightning.next_batch rank=0 step=3", 0, 3)
    assert check.judge(Evidence([*events, repeated])) == []


def test_the_io_of_a_file_object_is_read_not_reopened() -> None:
    """A load from bytes in memory (no path) is damaged in memory too."""
    buffer = io.BytesIO()
    torch.save({"w": 1}, buffer)
    buffer.seek(0)
    damaged = chaoslight.inject("bad_checkpoint@torch.load effect=truncated")
    with damaged, pytest.raises(RuntimeError, match="PytorchStreamReader failed"):
        torch.load(buffer)


def test_a_repeat_keeps_the_loops_own_batch_index() -> None:
    """A CombinedLoader fetch is (batch, batch_idx, dataloader_idx): only the batch repeats,
    so an evaluation loop's indices stay its own; a plain batch is repeated whole."""
    from chaoslight._sites._batches import _in_place_of

    assert _in_place_of(("old", 2, 0), ("new", 3, 0)) == ("old", 3, 0)
    assert _in_place_of(["old"], ["new"]) == ["old"]


def test_a_damaged_checkpoint_surfaces_through_whatever_reader_torch_load_uses() -> None:
    """Lightning 2.5 hands torch.load an fsspec file object: a short file fails its seek
    with ``OSError: [Errno 22]`` instead of PytorchStreamReader's message (found by the
    budget campaign on pytorch-lightning 2.5.1, where the rank was said to have swallowed
    the fault). An error raised inside torch's load is the damaged file's; the same error
    raised elsewhere is not."""
    fault = BadCheckpoint(site="lightning.load_checkpoint")
    inside = (
        "Traceback (most recent call last):\n"
        '  File "/w/train.py", line 109, in train\n'
        '  File "/v/torch/serialization.py", line 1568, in load\n'
        '  File "/v/torch/serialization.py", line 807, in __init__\n'
        '  File "/v/fsspec/implementations/local.py", line 486, in seek\n'
        "OSError: [Errno 22] Invalid argument"
    )
    assert fault.surfaced_in(inside)
    elsewhere = inside.replace("serialization.py", "disk_cache.py")
    assert not fault.surfaced_in(elsewhere)
