"""Injection started from the environment, in every Python process of a job.

``chaoslight run`` puts a ``sitecustomize`` on ``PYTHONPATH`` that calls :func:`arm`.
When ``CHAOSLIGHT_SCHEDULE`` is set (JSON, or a path to a schedule file), ``arm``
waits for torch to be imported -- most Python processes never need it -- and then
activates the schedule for the life of the process, appending events to
``$CHAOSLIGHT_EVENTS_DIR/events-<pid>.jsonl``. That is how ranks started by torchrun,
SLURM or Lightning's own launcher get the faults without a change to the user's code.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.machinery
import os
import sys
from pathlib import Path
from typing import Any

from chaoslight._runtime._inject import inject
from chaoslight._schedule import Schedule

SCHEDULE_VARIABLE = "CHAOSLIGHT_SCHEDULE"
EVENTS_VARIABLE = "CHAOSLIGHT_EVENTS_DIR"

_started: Any = None


def schedule_from_env() -> Any:
    """The Schedule named by ``CHAOSLIGHT_SCHEDULE`` (JSON or a file path), or None."""
    value = os.environ.get(SCHEDULE_VARIABLE, "").strip()
    if not value:
        return None
    if value.startswith("{"):
        return Schedule.from_json(value)
    return Schedule.load(value)


def start() -> Any:
    """Activate the environment's schedule now (idempotent); return the Injection."""
    global _started
    if _started is not None:
        return _started
    schedule = schedule_from_env()
    if schedule is None:
        return None
    events_dir = os.environ.get(EVENTS_VARIABLE)
    events_file = None
    if events_dir:
        Path(events_dir).mkdir(parents=True, exist_ok=True)
        events_file = Path(events_dir) / f"events-{os.getpid()}.jsonl"
    # Every process of a `chaoslight run` job is one of the job's own: a Crash kills
    # that process, as a lost node does, and never the user's test session.
    injection = inject(schedule, events_file=events_file, allow_crash=True)
    injection.from_environment = True
    injection.__enter__()
    _started = injection
    atexit.register(stop)
    return injection


def stop() -> None:
    """End the environment's injection (if started) and remove the import hook (if armed)."""
    global _started
    disarm()
    if _started is not None:
        injection, _started = _started, None
        atexit.unregister(stop)
        injection.__exit__(None, None, None)


def disarm() -> None:
    """Take our torch-import hook out of ``sys.meta_path``, if torch never came."""
    for finder in [f for f in sys.meta_path if isinstance(f, _AfterTorchImport)]:
        sys.meta_path.remove(finder)


class _AfterTorchImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds nothing itself; wraps torch's loader so :func:`start` runs once torch is in."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        self._loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        start()


def arm() -> None:
    """Called from ``sitecustomize``: start once torch is imported, if a schedule is set."""
    if not os.environ.get(SCHEDULE_VARIABLE):
        return
    if "torch" in sys.modules:
        start()
    elif not any(isinstance(f, _AfterTorchImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterTorchImport())  # stop() takes it out again
