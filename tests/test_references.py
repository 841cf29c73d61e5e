"""Fault-free references are per program: one check object reused across programs (a
module-level list of checks, the pytest plugin, a long-lived World) judges each program
by its own fault-free runs, never by another's; the checks judging one World example
share its fault-free reruns."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import fit, tiny_model_class
from lightning.pytorch import Callback

import chaoslight
from chaoslight import CheckFailed, Event, Schedule, World
from chaoslight._runtime._evidence import OBSERVATION
from chaoslight.checks import BuffersInSync, Deterministic, Evidence, LearnedInvariants, RankView

DELAY = "delay@lightning.training_step rank=0 seconds=0.01"
# A module-level check, as a test suite keeps one: every program below is judged by it.
SHARED = LearnedInvariants()
RNG_MOVED = "the torch RNG state is constant over steps"


@pytest.fixture(autouse=True)
def _lightning_in_process(request: pytest.FixtureRequest) -> None:
    """These tests fit with Lightning in this process: what its signal connector changes
    is put back by conftest's ``lightning_in_process``, where the suite has it."""
    with contextlib.suppress(pytest.FixtureLookupError):
        request.getfixturevalue("lightning_in_process")


class Dropping(tiny_model_class()):  # type: ignore[misc]
    """TinyModel with dropout: the global torch RNG moves at every step."""

    def __init__(self) -> None:
        super().__init__()
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(self.drop(x))


class SlowStepDraws(tiny_model_class()):  # type: ignore[misc]
    """Draws from the global RNG only after a slow step (a timing-dependent bug)."""

    def __init__(self) -> None:
        super().__init__()
        self.last = 0.0

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        now = time.monotonic()
        if self.last and now - self.last > 0.5:
            torch.rand(1)
        self.last = now


def program_a(**options: Any) -> None:
    """Draws no random number while it trains."""
    fit(max_steps=4, **options)


def program_b(**options: Any) -> None:
    """Dropout: draws at every step."""
    fit(Dropping(), max_steps=4, **options)


Way = Callable[[Callable[..., None], Any, list[Any]], list[Any]]


def through_inject(program: Callable[..., None], schedule: Any, checks: list[Any]) -> list[Any]:
    with chaoslight.inject(schedule, checks=checks) as run:
        program()
    return run.violations


def through_callback(program: Callable[..., None], schedule: Any, checks: list[Any]) -> list[Any]:
    callback = chaoslight.ChaosCallback(schedule, checks=checks)
    program(callbacks=[callback])
    return callback.run.violations


@pytest.fixture(params=["inject", "ChaosCallback", "chaos fixture"])
def way(request: pytest.FixtureRequest, chaos: Any) -> Way:
    """How the program is run under a schedule: each way in of the in-process API."""
    if request.param == "inject":
        return through_inject
    if request.param == "ChaosCallback":
        return through_callback

    def through_fixture(
        program: Callable[..., None], schedule: Any, checks: list[Any]
    ) -> list[Any]:
        with chaos(schedule, checks=checks) as run:
            program()
        return list(run.violations)

    return through_fixture


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_one_check_judges_a_second_program_by_its_own_fault_free_runs(way: Way) -> None:
    """Program A draws no random number, B uses dropout. One check saw A's two clean runs,
    then B's: B under a 10 ms delay is judged by B's runs, where the RNG moves at every
    step. (It was judged by A's: "the torch RNG state is constant over steps", a false
    alarm.)"""
    check = LearnedInvariants()
    for program in (program_a, program_a, program_b, program_b):
        assert way(program, Schedule(), [check]) == []
    assert way(program_b, DELAY, [check]) == []


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_the_cases_of_a_parametrized_test_are_programs_of_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same code and model, told apart only by the test case that runs them (a callback
    that draws from the RNG in one case): each case is judged by its own runs."""

    class Noisy(Callback):
        def on_train_batch_end(self, *args: Any) -> None:
            torch.rand(1)

    def case(name: str, callbacks: list[Any], schedule: Any = None) -> list[Any]:
        monkeypatch.setenv("PYTEST_CURRENT_TEST", f"tests/test_x.py::test_fit[{name}] (call)")
        with chaoslight.inject(schedule, checks=[SHARED]) as run:
            fit(max_steps=4, callbacks=callbacks)
        return run.violations

    assert case("plain", []) == [] and case("plain", []) == []
    assert case("noisy", [Noisy()]) == [] and case("noisy", [Noisy()]) == []
    assert case("noisy", [Noisy()], DELAY) == []


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_runs_of_one_program_entered_at_different_lines_are_its_references() -> None:
    """The usual in-process test: two clean runs, then one under a straggler, each its own
    ``with`` statement. The clean runs are the references: a draw from the RNG that only a
    slow step makes is found."""
    check = LearnedInvariants()
    with chaoslight.inject(Schedule(), checks=[check]):
        fit(SlowStepDraws(), max_steps=4)
    with chaoslight.inject(Schedule(), checks=[check]):
        fit(SlowStepDraws(), max_steps=4)
    slow = "delay@lightning.on_train_batch_start rank=0 step=2 seconds=0.8"
    with pytest.raises(CheckFailed, match=RNG_MOVED):  # noqa: SIM117
        with chaoslight.inject(slow, checks=[check]):
            fit(SlowStepDraws(), max_steps=4)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_deterministic_compares_runs_of_one_program_only() -> None:
    """One Deterministic object sees two runs of A, then B's: B's first run is not compared
    with A's (other weights: it was, "the runs part"), a later run of B is compared with
    B's first."""
    check = Deterministic()
    for program in (program_a, program_a, program_b):
        assert through_inject(program, Schedule(), [check]) == []
    with pytest.raises(CheckFailed, match="part at parameter"):
        through_inject(program_b, "corrupt@lightning.next_batch nth=2", [check])


# -- a World's target, edited ------------------------------------------------------------

STEPS = 3


def observed(target: str, rng: Callable[[int], str], schedule: str = "") -> Evidence:
    """A 2-rank run of ``target`` whose torch RNG digest at step s is ``rng(s)``."""
    events = [
        Event(
            OBSERVATION,
            LearnedInvariants.name,
            rank,
            step,
            float(step),
            float(step),
            detail=json.dumps({"fit": 0, "at": "step", "values": {"rng:torch": rng(step)}}),
        )
        for step in range(STEPS)
        for rank in (0, 1)
    ]
    plan = Schedule.parse(schedule) if schedule else Schedule()
    ranks = {rank: RankView(rank, "passed") for rank in (0, 1)}
    return Evidence(events, ranks, plan, target)


def test_an_edited_target_is_another_program(tmp_path: Path) -> None:
    """A long-lived check kept the references of ``prog.py:train`` (no random number);
    the file is edited to use dropout: its run under a delay is judged by two new
    fault-free runs of the edited program, not by the old file's."""
    program = tmp_path / "prog.py"
    program.write_text("def train(): pass\n")
    target = f"{program}:train"
    check = LearnedInvariants()
    unmoved = observed(target, lambda step: "r")
    assert check.judge_reruns(unmoved, _no_rerun, tmp_path) == []
    assert check.judge_reruns(observed(target, lambda step: "r"), _no_rerun, tmp_path) == []
    program.write_text("def train(): pass  # now with dropout\n")
    moving: list[Evidence] = [observed(target, lambda step: f"r{step}") for _ in range(2)]
    delayed = observed(target, lambda step: f"r{step}", DELAY)
    assert check.judge_reruns(delayed, lambda *a, **k: moving.pop(), tmp_path) == []
    assert moving == []  # both fault-free runs of the edited program were run


def _no_rerun(*args: Any, **kwargs: Any) -> Evidence:
    raise AssertionError("a fault-free run of a seen program costs no rerun")


# -- in a World ----------------------------------------------------------------------------

PROGRAM = """
import os
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

import lightning.pytorch as pl

RUNS = Path(__file__).with_suffix(".runs")


class Net(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.extra = {extra}
        # a per-rank buffer outside any norm layer, never broadcast: buffers-in-sync asks
        # the fault-free run whether it is per-rank by design
        self.register_buffer("mine", torch.full((1,), float(os.environ["RANK"])))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(self.extra(x)), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def train():
    if os.environ["RANK"] == "0":
        with open(RUNS, "a") as runs:
            runs.write("run\\n")
    pl.seed_everything(0, verbose=False)
    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(0))
    trainer = pl.Trainer(
        accelerator="cpu", devices=int(os.environ["WORLD_SIZE"]), max_steps=4,
        strategy=pl.strategies.DDPStrategy(broadcast_buffers=False),
        logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
    )
    trainer.fit(Net(), DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4))
"""


@pytest.fixture
def program(tmp_path: Path) -> Iterator[Callable[[str], tuple[str, Path]]]:
    """Write the 2-rank program with this extra layer; its target and its run counter."""

    def write(extra: str) -> tuple[str, Path]:
        path = tmp_path / "prog.py"
        path.write_text(PROGRAM.replace("{extra}", extra))
        return f"{path}:train", path.with_suffix(".runs")

    yield write


@pytest.mark.slow
def test_a_world_judges_an_edited_target_by_its_own_runs(
    world2: World, program: Callable[[str], tuple[str, Path]]
) -> None:
    """A World and a check that outlive an edit of the target: two clean runs of the
    program with no randomness, then the file gets dropout; a delay on the new code is
    judged by its own fault-free runs (it was a false alarm: the RNG moved)."""
    check = LearnedInvariants()
    target, _ = program("torch.nn.Identity()")
    for _ in range(2):
        assert world2.run(target, Schedule(), timeout=60, checks=[check]).passed
    program("torch.nn.Dropout(0.5)  # the edit")
    world2.renew()  # the ranks import the edited file
    outcome = world2.run(target, DELAY, timeout=60, checks=[check])
    assert outcome.passed, outcome.report()


@pytest.mark.slow
def test_the_checks_of_one_example_share_its_fault_free_runs(
    world2: World, program: Callable[[str], tuple[str, Path]]
) -> None:
    """buffers-in-sync (a per-rank buffer: it asks for one fault-free run) and
    learned-invariants (two) judge one example under a delay: the program runs three
    times in all (the example and two fault-free runs), not four."""
    target, runs = program("torch.nn.Identity()")
    checks = [BuffersInSync(), LearnedInvariants()]
    outcome = world2.run(target, DELAY, timeout=60, checks=checks)
    assert outcome.passed, outcome.report()
    assert runs.read_text().count("run") == 3
