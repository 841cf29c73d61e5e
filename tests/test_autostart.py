"""The environment's injection (``chaoslight run``): armed, started and stopped in-process."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import changed, patched_attributes

from chaoslight import Crash, Delay, Schedule, _runtime
from chaoslight._cli import main
from chaoslight._cli._run import _environment
from chaoslight._runtime import _autostart


def hooks() -> list[object]:
    """Our torch-import hooks in sys.meta_path."""
    return [f for f in sys.meta_path if type(f).__name__ == "_AfterTorchImport"]


def test_stop_removes_the_import_hook_when_torch_never_came(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """arm() before torch is imported adds one meta_path hook; stop() takes it out again."""
    monkeypatch.setenv(
        _autostart.SCHEDULE_VARIABLE, Schedule([Delay(0, site="torch.save")]).to_json()
    )
    monkeypatch.delitem(sys.modules, "torch")  # as if torch were not imported yet
    meta_path = list(sys.meta_path)
    _autostart.arm()
    _autostart.arm()  # armed twice (two sitecustomize calls): still one hook
    assert len(hooks()) == 1
    _autostart.stop()
    assert sys.meta_path == meta_path and _runtime.active() is None


def test_the_environment_may_schedule_a_crash_and_stop_restores_everything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job's process is its own: a Crash is allowed there; stop() undoes every patch."""
    schedule = Schedule([Crash(site="torch.save", step=3), Delay(0, site="torch.save")])
    monkeypatch.setenv(_autostart.SCHEDULE_VARIABLE, schedule.to_json())
    before = patched_attributes()
    injection = _autostart.start()
    try:
        assert injection is not None and _runtime.active() is injection
        torch.save(1, io.BytesIO())  # outside a fit the step is None: the crash never matches
    finally:
        _autostart.stop()
    assert [e.fault for e in injection.run.fired()] == ["delay@torch.save seconds=0"]
    assert _runtime.active() is None
    assert changed(before, patched_attributes()) == []


# -- only the job's ranks are armed ----------------------------------------------------------
def test_a_python_without_chaoslight_runs_as_if_chaoslight_were_not_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A system-Python tool the job calls (no chaoslight) runs, and the run says it was unarmed."""
    without = tmp_path / "no_chaoslight"
    (without / "chaoslight").mkdir(parents=True)
    (without / "chaoslight" / "__init__.py").write_text("raise ImportError('not installed')\n")
    monkeypatch.setenv("PYTHONPATH", str(without))  # after chaoslight run's hook, before it
    schedule = tmp_path / "s.txt"
    schedule.write_text("delay@torch.save seconds=0\n")
    tool = [sys.executable, "-c", "print('the tool ran')"]
    assert main(["run", "--schedule", str(schedule), "--timeout", "60", "--", *tool]) == 0
    out, err = capfd.readouterr()
    assert out.strip() == "the tool ran"
    assert (
        f"chaoslight: 1 Python process of the job ran without the schedule: {sys.executable} "
        "cannot import chaoslight (ImportError: not installed)"
    ) in err


def test_a_process_an_armed_rank_starts_is_not_armed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool a rank runs (same rank variables) gets no stack dump and no torch hook."""
    events = tmp_path / "events"
    env = _environment(Schedule([Delay(0, site="torch.save")]), tmp_path, events, tmp_path)
    for name in (_autostart.SCHEDULE_VARIABLE, _autostart.EVENTS_VARIABLE, _autostart.JOB_VARIABLE):
        monkeypatch.setenv(name, env[name])
    monkeypatch.setenv("RANK", "1")
    # start() marks this process armed for the processes it starts; set first, so that
    # monkeypatch takes the mark away again.
    monkeypatch.setenv(_autostart.ARMED_VARIABLE, "")
    monkeypatch.delenv(_autostart.ARMED_VARIABLE)
    try:
        _autostart.start()  # this process is rank 1, armed
        tool = (
            "import sys; print(sum(type(f).__name__ == '_AfterTorchImport' for f in sys.meta_path))"
        )
        done = subprocess.run(
            [sys.executable, "-c", tool],
            env={**os.environ, "PYTHONPATH": env["PYTHONPATH"]},
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        _autostart.stop()
    assert done.returncode == 0 and done.stdout.strip() == "0", done.stderr
    assert list(events.glob("stacks-*.txt")) == []


def test_ranks_a_launcher_starts_from_an_armed_process_are_armed() -> None:
    """Lightning's launcher (armed rank 0) gives each rank it starts its own LOCAL_RANK."""
    rank0 = {_autostart.JOB_VARIABLE: "job"}
    armed = f"job {_autostart.rank_identity(rank0)}"
    assert _autostart.is_rank(rank0)
    assert _autostart.is_rank({**rank0, _autostart.ARMED_VARIABLE: armed, "LOCAL_RANK": "1"})
    assert not _autostart.is_rank({**rank0, _autostart.ARMED_VARIABLE: armed})
    other_job = {**rank0, _autostart.ARMED_VARIABLE: armed, _autostart.JOB_VARIABLE: "inner"}
    assert _autostart.is_rank(other_job)  # a nested `chaoslight run` arms its own ranks
