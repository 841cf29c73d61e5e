"""Injection started from the environment, in every Python process of a job.

``chaoslight run`` puts a ``sitecustomize`` on ``PYTHONPATH`` that calls :func:`arm`.
When ``CHAOSLIGHT_SCHEDULE`` is set (JSON, or a path to a schedule file), ``arm``
waits for torch to be imported -- most Python processes never need it -- and then
activates the schedule for the life of the process, appending events to
``$CHAOSLIGHT_EVENTS_DIR/events-<pid>-<job>.jsonl``. That is how ranks started by
torchrun, SLURM or Lightning's own launcher get the faults without a change to the
user's code.

Only the job's ranks are armed (:func:`is_rank`): a process that a rank of the same job
started with the same rank variables (a tool it runs, a spawned DataLoader worker) is
left as it would be without chaoslight.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from chaoslight._runtime._context import RANK_VARIABLES
from chaoslight._runtime._inject import inject
from chaoslight._schedule import Schedule

SCHEDULE_VARIABLE = "CHAOSLIGHT_SCHEDULE"
EVENTS_VARIABLE = "CHAOSLIGHT_EVENTS_DIR"
# A token unique to one `chaoslight run` job: two jobs sharing an events folder tell their
# processes and files apart by it.
JOB_VARIABLE = "CHAOSLIGHT_RUN_JOB"
# Set by a rank when it arms, for the processes it starts: "<job> <rank variables>".
ARMED_VARIABLE = "CHAOSLIGHT_RUN_ARMED"

_started: Any = None


def schedule_from_env() -> Any:
    """The Schedule named by ``CHAOSLIGHT_SCHEDULE`` (JSON or a file path), or None."""
    value = os.environ.get(SCHEDULE_VARIABLE, "").strip()
    if not value:
        return None
    if value.startswith("{"):
        return Schedule.from_json(value)
    return Schedule.load(value)


def events_file(events_dir: str | os.PathLike[str], pid: int, job: str | None) -> Path:
    """Where process ``pid`` of job ``job`` appends its events."""
    return Path(events_dir) / (f"events-{pid}-{job}.jsonl" if job else f"events-{pid}.jsonl")


def rank_identity(environ: Mapping[str, str]) -> str:
    """The launcher's rank variables as this process has them (missing ones empty)."""
    return ",".join(f"{name}={environ.get(name, '')}" for name in RANK_VARIABLES)


def is_rank(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this interpreter is one of the job's ranks, to be armed.

    Every Python process of the job is, except one started by an armed rank of the same
    job that has the same rank variables: a tool or a worker the rank runs (a rank's own
    launcher gives each rank it starts different ones: ``LOCAL_RANK``, ``RANK``)."""
    env = os.environ if environ is None else environ
    job = env.get(JOB_VARIABLE)
    return not job or env.get(ARMED_VARIABLE) != f"{job} {rank_identity(env)}"


def start() -> Any:
    """Activate the environment's schedule now (idempotent); return the Injection."""
    global _started
    if _started is not None:
        return _started
    schedule = schedule_from_env()
    if schedule is None:
        return None
    events_dir = os.environ.get(EVENTS_VARIABLE)
    job = os.environ.get(JOB_VARIABLE)
    events = None
    if events_dir:
        Path(events_dir).mkdir(parents=True, exist_ok=True)
        events = events_file(events_dir, os.getpid(), job)
    # Every process of a `chaoslight run` job is one of the job's own: a Crash kills
    # that process, as a lost node does, and never the user's test session.
    injection = inject(schedule, events_file=events, allow_crash=True)
    injection.from_environment = True
    injection.__enter__()
    _started = injection
    if job:  # what this rank starts with its own rank variables is not a rank
        os.environ[ARMED_VARIABLE] = f"{job} {rank_identity(os.environ)}"
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
