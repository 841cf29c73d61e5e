"""``chaoslight run --schedule FILE -- COMMAND``: faults in every Python process of a job.

The command runs unchanged (``torchrun``, ``srun``, ``python train.py``) with a
``sitecustomize`` on ``PYTHONPATH`` that arms the schedule in each Python process once
it imports torch. Each process appends its events to a JSON-lines file; at the end the
logs are merged by time and printed, and the command's exit status is returned.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

from rich.console import Console

from chaoslight._cli._usage import UsageError
from chaoslight._runtime._autostart import EVENTS_VARIABLE, SCHEDULE_VARIABLE
from chaoslight._runtime._events import Event, from_jsonl, merge, render_report
from chaoslight._runtime._proc import kill_tree
from chaoslight._schedule._model import Schedule

TIMEOUT_STATUS = 124

SITECUSTOMIZE = """\
# Written by `chaoslight run`: arms fault injection in every Python process of the job.
import sys

try:
    from chaoslight._runtime._autostart import arm
except ImportError as exc:  # a fault silently not injected would look like a pass
    sys.exit(f"chaoslight run: this Python cannot import chaoslight ({exc})")
arm()
"""


def run_command(args: argparse.Namespace) -> int:
    command = list(args.argv)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise UsageError("run needs a command after --, e.g. -- torchrun train.py")
    if args.timeout is not None and args.timeout <= 0:
        raise UsageError(f"--timeout={args.timeout} must be positive")
    schedule = Schedule.load(args.schedule)
    with tempfile.TemporaryDirectory(prefix="chaoslight-run-") as scratch:
        events_dir = Path(args.events_dir or Path(scratch) / "events")
        status = _launch(command, schedule, Path(scratch), events_dir, args.timeout)
        events = read_events(events_dir)
    console = Console(stderr=True, highlight=False, markup=False)
    console.print(render_report(events, reached=Counter()), soft_wrap=True)
    if status == TIMEOUT_STATUS:
        console.print(f"chaoslight: the command ran past --timeout={args.timeout:g} s: killed")
    return status


def _launch(
    command: list[str], schedule: Schedule, scratch: Path, events_dir: Path, timeout: float | None
) -> int:
    hook_dir = scratch / "hook"
    hook_dir.mkdir()
    (hook_dir / "sitecustomize.py").write_text(SITECUSTOMIZE)
    schedule_file = scratch / "schedule.json"
    schedule.save(schedule_file)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hook_dir), env.get("PYTHONPATH")]))
    env[SCHEDULE_VARIABLE] = str(schedule_file)
    env[EVENTS_VARIABLE] = str(events_dir)
    try:
        process = subprocess.Popen(command, env=env, start_new_session=True)
    except FileNotFoundError:
        raise UsageError(f"command not found: {command[0]}") from None
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        return TIMEOUT_STATUS
    except BaseException:
        _kill_group(process)
        raise


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    kill_tree(process.pid)  # ranks may sit in sessions of their own: kill the whole tree
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def read_events(events_dir: Path) -> list[Event]:
    """Every process's events from ``events-*.jsonl`` in the folder, merged by time."""
    events: list[Event] = []
    for path in sorted(events_dir.glob("events-*.jsonl")):
        events += from_jsonl(path.read_text())
    return merge(events)
