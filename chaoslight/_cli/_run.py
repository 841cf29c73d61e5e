"""``chaoslight run --schedule FILE -- COMMAND``: faults in every Python process of a job.

The command runs unchanged (``torchrun``, ``srun``, ``python train.py``) with a
``sitecustomize`` on ``PYTHONPATH`` that arms the schedule in each rank's Python process
once it imports torch, then runs the ``sitecustomize`` it shadows, if there is one. A
Python that cannot import chaoslight (a system tool the job calls) runs untouched, and
is named at the end. Each process appends its events to a JSON-lines file named by the
job's token; at the end this job's logs are merged by time and printed, and the
command's exit status is returned. A deadline (one hour unless
``--timeout`` says otherwise) bounds every job: at the deadline each Python process is
asked for its stacks, the whole job is killed, and where each process waited is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import linecache
import os
import secrets
import signal
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console

from chaoslight._cli._job import EXIT_TIMEOUT, CommandJob, Ending, ProcessSnapshot, terminate_raises
from chaoslight._cli._usage import RawDefaultsFormatter, UsageError
from chaoslight._runtime._autostart import (
    ARMED_VARIABLE,
    EVENTS_VARIABLE,
    JOB_VARIABLE,
    SCHEDULE_VARIABLE,
)
from chaoslight._runtime._dumps import innermost_user_frame, main_thread_frames, remove_empty_dumps
from chaoslight._runtime._events import Event, merge, read_event_log, render_report
from chaoslight._runtime._resolve import check_runnable
from chaoslight._schedule._model import Schedule
from chaoslight._sites._damage import LEDGER_VARIABLE, make_ledger, settle

RUN_TIMEOUT_S = 3600.0  # the whole job's deadline, by default

EXIT_STATUS_HELP = f"""\
exit status:
  N     the command's own exit status, passed through (128+N if signal N killed it)
  {EXIT_TIMEOUT}   chaoslight killed the job at --timeout, as timeout(1) does; stderr
        then says where each process was waiting
  2     usage error: chaoslight refused before starting anything (one line on stderr)
  126   the command exists but cannot be executed; 127: command not found (as a shell)
  130   interrupted (Ctrl-C)
A status from chaoslight itself always comes with a "chaoslight:" line on stderr; if the
command itself exits {EXIT_TIMEOUT}, chaoslight says it was not its timeout."""

UNARMED_PREFIX = "unarmed-"  # a note left by a Python that could not import chaoslight

SITECUSTOMIZE = f"""\
# Written by `chaoslight run`: arms fault injection in each rank of the job, then runs the
# sitecustomize this file shadows (the next one on sys.path), if any. Another interpreter
# (a system Python the job calls, without chaoslight) runs as it would without this file,
# and leaves a note, so that `chaoslight run` can say it ran without the schedule.
import importlib.machinery
import importlib.util
import os
import sys


def _unarmed(exc):
    folder = os.environ.get({EVENTS_VARIABLE!r})
    if not folder:
        return
    name = "{UNARMED_PREFIX}%d-%s.txt" % (os.getpid(), os.environ.get({JOB_VARIABLE!r}, ""))
    try:
        with open(os.path.join(folder, name), "w") as note:
            note.write("%s\\t%s: %s\\n" % (sys.executable, type(exc).__name__, exc))
    except Exception:
        pass


try:
    from chaoslight._runtime._autostart import arm, is_rank
    from chaoslight._runtime._dumps import arm_dumps
except Exception as exc:  # whatever the reason, the job's own tool must keep working
    _unarmed(exc)
else:
    if is_rank():
        arm_dumps()
        arm()


def _chain():
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_chain()
"""


def add_command(commands: Any) -> None:
    run = commands.add_parser(
        "run",
        help="run any command with a schedule active in every Python process it starts",
        description="chaoslight run --schedule FILE -- torchrun --nproc-per-node 2 train.py",
        epilog=EXIT_STATUS_HELP,
        formatter_class=RawDefaultsFormatter,
    )
    run.add_argument(
        "--schedule", required=True, help="schedule file, JSON or text form (required)"
    )
    run.add_argument(
        "--timeout",
        type=float,
        default=RUN_TIMEOUT_S,
        metavar="S",
        help=f"kill the whole job after S seconds, exit status {EXIT_TIMEOUT} "
        "(default: %(default)g)",
    )
    run.add_argument(
        "--events-dir",
        default=None,
        metavar="DIR",
        help="keep each process's event log and stack dump in DIR, made if missing "
        "(default: a temporary folder, removed at the end)",
    )
    run.add_argument("argv", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")


def run_command(args: argparse.Namespace) -> int:
    command = list(args.argv)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise UsageError("run needs a command after --, e.g. -- torchrun train.py")
    timeout = args.timeout  # in range: see _arguments
    schedule = Schedule.load(args.schedule)
    check_runnable(schedule, ranks=None)  # what the job's processes would refuse, said first
    events_dir = None if args.events_dir is None else _events_dir(args.events_dir)
    console = Console(stderr=True, highlight=False, markup=False, soft_wrap=True)
    with tempfile.TemporaryDirectory(prefix="chaoslight-run-") as scratch, terminate_raises():
        folder = events_dir or Path(scratch) / "events"
        folder.mkdir(exist_ok=True)
        # Backups of what the job's faults damage: the job's own folder, outside the events
        # folder (kept, should a file not go back), named to its processes.
        ledger = make_ledger()
        try:
            environment = _environment(schedule, Path(scratch), folder, ledger)
            ending = CommandJob(command, environment, folder).run(timeout)
        finally:  # the job is over, whole: the user's files go back as they were
            settle(ledger)
        job = environment[JOB_VARIABLE]
        events, truncated, malformed = read_events(folder, job)
        unarmed = read_unarmed(folder, job)
        remove_empty_dumps(folder)
    console.print(render_report(events, reached=Counter()))
    for line in [*_notes(ending, events, truncated, malformed, timeout, events_dir), *unarmed]:
        console.print(f"chaoslight: {line}")
    return ending.status


def _events_dir(value: str) -> Path:
    """The folder, made, as an absolute path: the job's processes may change directory.
    A folder of another user is refused: the job's logs would be theirs to write."""
    folder = Path(value).absolute()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        owner = folder.stat().st_uid
    except OSError as exc:
        raise UsageError(f"--events-dir={value!r} cannot be made: {exc.strerror}") from None
    if owner != os.getuid():
        raise UsageError(
            f"--events-dir={value!r} belongs to another user (uid {owner}); chaoslight keeps "
            "a job's logs only in a folder of yours: give another folder"
        )
    return folder


def _environment(
    schedule: Schedule, scratch: Path, events_dir: Path, ledger: Path
) -> dict[str, str]:
    hook_dir = scratch / "hook"
    hook_dir.mkdir()
    (hook_dir / "sitecustomize.py").write_text(SITECUSTOMIZE)
    schedule_file = scratch / "schedule.json"
    schedule.save(schedule_file)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hook_dir), env.get("PYTHONPATH")]))
    env[SCHEDULE_VARIABLE] = str(schedule_file)
    env[EVENTS_VARIABLE] = str(events_dir)
    env[JOB_VARIABLE] = secrets.token_hex(6)  # this job's, apart from any other's
    env[LEDGER_VARIABLE] = str(ledger)  # where its processes back up what faults damage
    env.pop(ARMED_VARIABLE, None)  # an enclosing job's mark: no rank of this job yet
    return env


def read_events(events_dir: Path, job: str | None = None) -> tuple[list[Event], int, int]:
    """Every process's events from ``events-PID-JOB.jsonl`` (job ``job``; every job's with
    None), merged by time; and how many lines were skipped: truncated (a process killed
    mid-write) and otherwise malformed (``read_event_log``)."""
    logs = [
        read_event_log(path)
        for path in sorted(events_dir.glob(f"events-*-{job}.jsonl" if job else "events-*.jsonl"))
    ]
    events = merge(event for log in logs for event in log.events)
    return events, sum(log.truncated for log in logs), sum(log.malformed for log in logs)


def read_unarmed(events_dir: Path, job: str) -> list[str]:
    """One line per interpreter of job ``job`` that could not import chaoslight, and why."""
    found: dict[str, int] = {}
    for path in events_dir.glob(f"{UNARMED_PREFIX}*-{job}.txt"):
        with contextlib.suppress(OSError):
            line = path.read_text(encoding="utf-8", errors="replace").strip()
            found[line] = found.get(line, 0) + 1
    notes = []
    for line, count in sorted(found.items()):
        python, _, why = line.partition("\t")
        notes.append(
            f"{_count(count, 'Python process')} of the job ran without the schedule: "
            f"{python} cannot import chaoslight ({why})"
        )
    return notes


def _notes(
    ending: Ending,
    events: list[Event],
    truncated: int,
    malformed: int,
    timeout: float,
    events_dir: Path | None,
) -> list[str]:
    notes = []
    if truncated:
        notes.append(f"{_count(truncated, 'truncated event line')} skipped (killed mid-write)")
    if malformed:
        notes.append(f"{_count(malformed, 'malformed event line')} skipped")
    if ending.timed_out:
        notes.append(f"the command ran past --timeout={timeout:g} s; where each process was:")
        notes += ["  " + describe(seen, events) for seen in ending.seen]
        if events_dir is not None:
            notes.append(f"  every thread's stack: {events_dir}/stacks-PID.txt")
        notes.append(f"killed the job: exit status {EXIT_TIMEOUT} (timeout)")
    elif ending.killed_by is not None:
        notes.append(
            f"the command was killed by signal {ending.killed_by} "
            f"({_signal_name(ending.killed_by)}): exit status {ending.status}"
        )
    elif ending.status == EXIT_TIMEOUT:
        notes.append(f"the command itself exited {EXIT_TIMEOUT}: not chaoslight's timeout")
    if ending.leftovers:
        pids = ", ".join(map(str, ending.leftovers))
        notes.append(f"killed {_count(len(ending.leftovers), 'process')} left behind: {pids}")
    if ending.unreaped:
        notes.append("the command did not exit even after SIGKILL (stuck in the kernel?)")
    return notes


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown signal"


def _count(n: int, noun: str) -> str:
    plural = "es" if noun.endswith("s") else "s"
    return f"{n} {noun}{'' if n == 1 else plural}"


def describe(seen: ProcessSnapshot, events: list[Event]) -> str:
    """``pid 123 (rank 1, python3): last at dist.all_reduce #4 step 1; waits in ...``."""
    own = [e for e in events if e.pid == seen.pid]
    rank = own[-1].rank if own else seen.rank
    label = f"pid {seen.pid} ({'' if rank is None else f'rank {rank}, '}{seen.name})"
    parts = [_last_event(own[-1]) if own else "no events"]
    if not seen.armed:
        parts.append("not a Python process of the job: no stacks")
    elif not seen.dump.strip():
        parts.append("gave no stacks in time")
    else:
        parts.append(_position(seen.dump))
    return f"{label}: " + "; ".join(parts)


def _last_event(event: Event) -> str:
    text = f"last at {event.site}" + (f" #{event.call}" if event.call else "")
    text += "" if event.step is None else f" step {event.step}"
    return text + (f" ({event.kind} {event.fault})" if event.fault else f" ({event.kind})")


def _position(dump: str) -> str:
    frames = main_thread_frames(dump)
    user = innermost_user_frame(frames)
    if user is None:
        return f"innermost frame {frames[0].where()}" if frames else "no Python frame"
    code = linecache.getline(user.filename, user.lineno).strip()
    text = f"waits in {user.where()}" + (f": {code}" if code else "")
    if frames[0] is not user:
        text += f" [innermost: {frames[0].where()}]"
    return text
