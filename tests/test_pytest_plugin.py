"""The pytest plugin: fixtures, options, and the chaoslight section of a failure report."""

from __future__ import annotations

import json
from pathlib import Path

import lightning.pytorch  # noqa: F401  (imported before pytester's inline runs snapshot
import pytest
import pytorch_lightning  # noqa: F401   sys.modules: re-importing torch there crashes it)
import torch  # noqa: F401

FAILING_SUITE = '''
import lightning.pytorch as pl
import torch
from hypothesis import HealthCheck, given, settings
from torch.utils.data import DataLoader, TensorDataset

from chaoslight.strategies import schedules


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit():
    data = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=2, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(Model(), DataLoader(data, batch_size=4))


@settings(max_examples=3, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schedule=schedules(world_size=1, steps=2, faults=["raise"], max_faults=1,
                          sites=["lightning.training_step"], in_process=True))
def test_code_under_chaos(chaos, schedule):
    """A real fit under the schedule: every raised error fails it; Hypothesis shrinks."""
    with chaos(schedule) as run:
        fit()
'''

PASSING_SUITE = '''
import chaoslight

def test_nothing_fires(chaos):
    """An empty schedule: nothing fires."""
    with chaos(chaoslight.Schedule()) as run:
        pass
    assert run.fired() == []
'''


@pytest.mark.slow
@pytest.mark.usefixtures("lightning_in_process")
def test_failing_suite_reports_minimal_schedule_and_writes_it(pytester: pytest.Pytester) -> None:
    """A failing test's report shows the shrunk schedule and replay hint; the JSON is saved."""
    pytester.makepyfile(test_suite=FAILING_SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*chaoslight*",
            "failing schedule, as Hypothesis shrank it:",
            "  raise@lightning.training_step rank=0 step=0",
            "schedule written to .chaoslight/failures/test_suite.py_test_code_under_chaos.json",
        ]
    )
    saved = Path(pytester.path, ".chaoslight/failures/test_suite.py_test_code_under_chaos.json")
    doc = json.loads(saved.read_text())
    assert doc["schedule"]["faults"][0]["kind"] == "raise"
    result.stdout.fnmatch_lines(["*RuntimeError: injected by chaoslight*"])  # it really fired


def test_passing_suite_has_no_chaoslight_section(pytester: pytest.Pytester) -> None:
    """A passing suite runs clean and writes no failure file."""
    pytester.makepyfile(test_suite=PASSING_SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "failing schedule" not in result.stdout.str()
    assert not Path(pytester.path, ".chaoslight").exists()
    result.stdout.fnmatch_lines(["chaoslight: 1 schedules run by the chaos fixtures; *"])


def test_options_are_registered(pytester: pytest.Pytester) -> None:
    """The chaos options appear in pytest's help, so the plugin loads from its entry point;
    the search's seed and size are Hypothesis's own options, not chaoslight's."""
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*--chaos-world-size*", "*--chaos-timeout*"])
    assert "--chaos-seed" not in result.stdout.str()


WORLD_SUITE = '''
import pytest
import chaoslight

TARGET = {target!r}

@pytest.mark.chaos_world(size=2)
def test_world_fails(chaos_world):
    """A Raise on rank 1 fails the example; every rank's traceback in the message."""
    outcome = chaos_world.run(TARGET, "raise@lightning.training_step rank=1 step=1", timeout=20)
    assert outcome.passed, outcome.report()

def test_world_passes(chaos_world):
    """An empty schedule passes on the session World."""
    assert chaos_world.run(TARGET, chaoslight.Schedule(), timeout=20).passed
'''

KNOWN_SUITE = '''
import chaoslight

def test_preempted(chaos_world):
    """SIGTERM to one rank of a plain Lightning job: Lightning's own known issue."""
    outcome = chaos_world.run({target!r}, "preempt@lightning.training_step rank=1 step=3",
                              timeout=4)
    verdict = chaos_world.judge(outcome)
    assert not verdict.failed, verdict.reason
'''


@pytest.mark.slow
def test_chaos_world_reports_replay_command_and_sets_a_known_issue_apart(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """chaos_world runs real 2-rank examples; a failure's report is short, on CI too (where
    pytest's short summary is not truncated): the cause, the schedule, the replay command
    and where the timeline and the whole report (every rank's traceback) were written.
    chaos_world.judge sets Lightning's known SIGTERM issue aside, listed once in the summary;
    --chaos-strict makes it the test's failure. (One session runs both suites: each pytest
    run starts a World, which costs seconds.)"""
    monkeypatch.setenv("CI", "1")
    examples = Path(__file__).resolve().parent.parent / "examples"
    target = f"{examples / 'ddp_train.py'}:train"
    preempted = f"{examples / 'catalogue' / 'preemption.py'}:train_buggy"
    pytester.makepyfile(
        test_world=WORLD_SUITE.format(target=target),
        test_known=KNOWN_SUITE.format(target=preempted),
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "ignore")
    result.assert_outcomes(failed=1, passed=2)
    kept = ".chaoslight/failures/test_world.py_test_world_fails"
    result.stdout.fnmatch_lines(
        [
            "*AssertionError: chaoslight World: * rank 1 raised: RuntimeError: injected*",
            f"... * lines cut by chaoslight: the whole report is in {kept}.txt",
            "*raise@lightning.training_step rank=1 step=1*",
            f"timeline: {kept}.html (open it in a browser: a lane per rank)",
            f"the whole report, with every rank's traceback: {kept}.txt",
            f"replay: chaoslight replay {kept}.json *",
        ]
    )
    result.stdout.fnmatch_lines(["chaoslight: known issue in *lightning 2.*", "*workaround:*"])
    assert result.stdout.str().count("chaoslight: known issue in") == 1, result.stdout.str()
    assert len(result.stdout.lines) < 120, result.stdout.str()
    whole = Path(pytester.path, f"{kept}.txt").read_text()
    assert "rank 0: released" in whole and whole.count("Traceback (most recent call last)") >= 4
    page = Path(pytester.path, f"{kept}.html").read_text()
    assert page.count("class='lane'") == 2 and "span c-coll" in page  # traced: collectives
    strict = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-W", "ignore", "--chaos-strict", "test_known.py"
    )
    strict.assert_outcomes(failed=1)
