"""The environment's injection (``chaoslight run``): armed, started and stopped in-process."""

from __future__ import annotations

import io
import sys

import pytest
import torch
from helpers import changed, patched_attributes

from chaoslight import Crash, Delay, Schedule, _runtime
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
