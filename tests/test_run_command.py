"""`chaoslight run`: a deadline on every job, evidence of where it waited, exit statuses that
say who ended it, a user's own sitecustomize kept, and nothing left running afterwards."""

from __future__ import annotations

import json
import os
import select
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from chaoslight._cli import build_parser, main
from chaoslight._cli._job import EXIT_TIMEOUT, CommandJob
from chaoslight._cli._run import RUN_TIMEOUT_S, read_events
from chaoslight._runtime._autostart import EVENTS_VARIABLE, JOB_VARIABLE
from chaoslight._runtime._events import EventLog, read_event_log

CLI = [sys.executable, "-m", "chaoslight._cli"]
TEST_TIMEOUT_S = 120  # every subprocess here ends long before this, or the test fails


def run_cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Any:
    """``chaoslight ARGS`` in a subprocess, bounded by the test's own timeout."""
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=TEST_TIMEOUT_S,
    )


def startup_timeout(least: float) -> str:
    """A ``--timeout`` the job outlasts only once it sits where the test waits for it: the
    time ``python -c "import torch"`` takes on this machine now, measured (on a busy
    machine it is several times a quiet one's), three times over, plus ``least``. A fixed
    bound failed these tests by chance whenever other jobs loaded the machine."""
    started = time.monotonic()
    command = [sys.executable, "-c", "import torch"]
    subprocess.run(command, capture_output=True, timeout=TEST_TIMEOUT_S, check=True)
    return f"{3 * (time.monotonic() - started) + least:.0f}"


@pytest.fixture
def schedule(tmp_path: Path) -> Path:
    path = tmp_path / "s.txt"
    path.write_text("delay@torch.save seconds=0.01\n")
    return path


def event_line(pid: int) -> str:
    return json.dumps(
        {
            "kind": "fired",
            "site": "torch.save",
            "rank": 0,
            "step": None,
            "time": 1.0,
            "wall": 1.0,
            "fault": "delay@torch.save seconds=0.01",
            "call": 1,
            "detail": "",
            "pid": pid,
        }
    )


# -- the deadline ------------------------------------------------------------------------
def test_run_has_a_finite_default_timeout_documented_in_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Without --timeout a job still has a deadline, and --help names it and its status."""
    args = build_parser().parse_args(["run", "--schedule", "s.txt", "--", "true"])
    assert args.timeout == RUN_TIMEOUT_S < float("inf")
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = capsys.readouterr().out
    assert f"(default: {RUN_TIMEOUT_S:g})" in text
    assert str(EXIT_TIMEOUT) in text and "timeout(1)" in text


@pytest.mark.slow
def test_blocked_command_is_killed_at_the_timeout_with_where_it_waited(
    tmp_path: Path, schedule: Path
) -> None:
    """A command that blocks ends at --timeout with status 124 and the user frame it sat in."""
    script = tmp_path / "hang.py"
    script.write_text(
        "import time\n\ndef wait_forever():\n    time.sleep(1000)\n\nwait_forever()\n"
    )
    timeout = startup_timeout(least=2)
    argv = ["run", "--schedule", str(schedule), "--timeout", timeout, "--", sys.executable]
    result = run_cli(*argv, str(script), cwd=tmp_path)
    assert result.returncode == EXIT_TIMEOUT, result.stderr
    assert f"ran past --timeout={timeout} s" in result.stderr
    assert "waits in wait_forever (hang.py:4): time.sleep(1000)" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_timeout_evidence_names_each_ranks_last_event(tmp_path: Path, schedule: Path) -> None:
    """At the timeout each Python process is listed with its rank, its last event and frame."""
    script = tmp_path / "save_then_wait.py"
    script.write_text(
        "import time\nimport torch\n\n"
        "torch.save({'a': 1}, 'out.pt')\n"
        "print('saved', flush=True)\n"
        "time.sleep(1000)\n"
    )
    events = tmp_path / "events"
    env = {**os.environ, "RANK": "1"}
    timeout = startup_timeout(least=4)  # to import torch and save; then it sleeps
    argv = ["run", "--schedule", str(schedule), "--timeout", timeout, "--events-dir", str(events)]
    result = run_cli(
        *argv, "--", "bash", "-c", f"{sys.executable} {script}; true", cwd=tmp_path, env=env
    )
    assert result.returncode == EXIT_TIMEOUT, result.stderr
    assert "saved" in result.stdout
    lines = [line for line in result.stderr.splitlines() if " pid " in line]
    python = next(line for line in lines if "torch.save" in line)
    assert "(rank 1, python" in python and "last at torch.save #1" in python
    assert "waits in <module> (save_then_wait.py:6): time.sleep(1000)" in python
    assert any("bash)" in line and "not a Python process" in line for line in lines)
    dumps = list(events.glob("stacks-*.txt"))
    assert dumps and "save_then_wait.py" in dumps[0].read_text()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "status"), [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGKILL, -9)]
)
def test_the_command_ends_when_chaoslight_run_is_stopped(
    tmp_path: Path, schedule: Path, signum: int, status: int
) -> None:
    """SIGTERM to `chaoslight run` (a cancelled CI job), or even SIGKILL, ends the command."""
    marker = tmp_path / "child.pid"
    code = f"import os, time; open({str(marker)!r}, 'w').write(str(os.getpid())); time.sleep(1000)"
    process = subprocess.Popen(
        [*CLI, "run", "--schedule", str(schedule), "--", sys.executable, "-c", code],
        cwd=tmp_path,
        stderr=subprocess.DEVNULL,
    )
    child = None
    try:
        deadline = time.monotonic() + TEST_TIMEOUT_S
        while not marker.exists() or not marker.read_text():
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.05)
        child = int(marker.read_text())
        process.send_signal(signum)
        assert process.wait(timeout=30) == status
        deadline = time.monotonic() + 30
        while _running(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(child)
    finally:
        process.kill()
        process.wait(timeout=30)
        if child is not None and _running(child):
            os.kill(child, signal.SIGKILL)


# -- exit statuses -------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize(
    ("shell", "status", "note"),
    [
        ("exit 3", 3, None),
        ("kill -9 $$", 128 + 9, "killed by signal 9 (SIGKILL)"),
        ("exit 124", 124, "the command itself exited 124: not chaoslight's timeout"),
    ],
)
def test_the_commands_status_passes_through(
    shell: str, status: int, note: str | None, schedule: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command's own status is returned as a shell reports it, 124 included, with a note."""
    assert (
        main(["run", "--schedule", str(schedule), "--timeout", "60", "--", "bash", "-c", shell])
        == status
    )
    err = capsys.readouterr().err
    assert "ran past --timeout" not in err
    if note:
        assert note in err


def test_missing_command_exits_127_as_a_shell_does(
    schedule: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A command that does not exist is status 127 with one line, as sh and timeout(1) say."""
    assert main(["run", "--schedule", str(schedule), "--", "no-such-command-xyz"]) == 127
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["chaoslight: error: command not found: no-such-command-xyz"]


@pytest.mark.slow
def test_processes_left_behind_are_killed(
    schedule: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A background process the command leaves running is killed and named when it ends."""
    marker = tmp_path / "left.pid"
    shell = f"sleep 1000 & echo $! > {marker}; exit 0"
    assert (
        main(["run", "--schedule", str(schedule), "--timeout", "60", "--", "bash", "-c", shell])
        == 0
    )
    left = int(marker.read_text())
    assert f"left behind: {left}" in capsys.readouterr().err
    assert not psutil.pid_exists(left) or psutil.Process(left).status() == "zombie"


# -- a user's sitecustomize ------------------------------------------------------------------
@pytest.mark.slow
def test_a_sitecustomize_already_on_the_path_still_runs(tmp_path: Path, schedule: Path) -> None:
    """The job's own sitecustomize (on PYTHONPATH) runs after chaoslight's, not shadowed."""
    user = tmp_path / "user_path"
    user.mkdir()
    marker = tmp_path / "marker"
    (user / "sitecustomize.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
    )
    check = "import sitecustomize; print(sitecustomize.__file__)"
    env = {**os.environ, "PYTHONPATH": str(user)}
    argv = ["run", "--schedule", str(schedule), "--", sys.executable, "-c", check]
    result = run_cli(*argv, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert marker.read_text() == "ran"
    assert result.stdout.strip() == str(user / "sitecustomize.py")


# -- event logs ----------------------------------------------------------------------------
def test_a_truncated_last_event_line_is_skipped_and_counted(tmp_path: Path) -> None:
    """An event log cut mid-line (its process killed mid-write) reads without a traceback."""
    (tmp_path / "events-7.jsonl").write_text(event_line(7) + "\n" + event_line(7)[:25])
    (tmp_path / "events-8.jsonl").write_bytes(b"\xff\xfe not json\n" + event_line(8).encode())
    events, truncated, malformed = read_events(tmp_path)
    assert [e.pid for e in events] == [7, 8]
    assert (truncated, malformed) == (1, 1)


def test_a_rank_log_with_a_torn_last_line_yields_its_complete_events(tmp_path: Path) -> None:
    """The one event-log reader skips a torn last line and counts any other bad line."""
    log = tmp_path / "rank1.events.jsonl"
    log.write_text(event_line(1) + "\n" + event_line(2) + "\n" + event_line(3)[:40])
    read = read_event_log(log)
    assert [e.pid for e in read.events] == [1, 2]
    assert (read.truncated, read.malformed) == (1, 0)
    log.write_text(event_line(1) + "\n{oops\n" + event_line(2) + "\n")
    read = read_event_log(log)
    assert [e.pid for e in read.events] == [1, 2] and (read.truncated, read.malformed) == (0, 1)
    assert read_event_log(tmp_path / "never-written.jsonl") == EventLog()


@pytest.mark.slow
def test_run_reports_truncated_event_lines_in_one_line(
    tmp_path: Path, schedule: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`chaoslight run` says how many truncated event lines it skipped, and no traceback."""
    events = tmp_path / "events"
    log = f'"${EVENTS_VARIABLE}/events-99-${JOB_VARIABLE}.jsonl"'  # as the job's process names it
    write = f"printf '%s\\n%s' {shlex.quote(event_line(99))} '{{\"kind\": \"fi' > {log}"
    argv = ["run", "--schedule", str(schedule), "--events-dir", str(events), "--timeout", "60"]
    argv += ["--", "bash", "-c", write]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "chaoslight: 1 truncated event line skipped" in err
    assert "fired    delay@torch.save" in err and "Traceback" not in err


# -- jobs side by side, and pids that are no longer the job's ---------------------------------
def test_two_jobs_sharing_an_events_dir_leave_each_other_alone(
    tmp_path: Path, schedule: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A job ending beside another in one --events-dir kills and reads only its own."""
    events = tmp_path / "events"
    events.mkdir()
    other_env = {**os.environ, EVENTS_VARIABLE: str(events), JOB_VARIABLE: "0123456789ab"}
    other = subprocess.Popen(["sleep", "60"], env=other_env, start_new_session=True)
    try:
        # What the other job's armed rank has in the folder: its (empty) stack file, its events.
        (events / f"stacks-{other.pid}.txt").write_text("")
        (events / f"events-{other.pid}-0123456789ab.jsonl").write_text(event_line(other.pid) + "\n")
        argv = ["run", "--schedule", str(schedule), "--events-dir", str(events), "--timeout", "60"]
        assert main([*argv, "--", "true"]) == 0
        err = capsys.readouterr().err
        assert other.poll() is None, "the other job's process was killed"
        assert "left behind" not in err and "fired" not in err, err
        assert (events / f"stacks-{other.pid}.txt").exists()
    finally:
        other.kill()
        other.wait()


def test_no_signal_goes_to_the_commands_pid_once_it_is_reaped(
    schedule: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the command is reaped its pid may be another process's: it is sent nothing."""
    started: list[subprocess.Popen[bytes]] = []
    late: list[tuple[str, int]] = []
    real_start = CommandJob._start

    def start(job: CommandJob) -> subprocess.Popen[bytes]:
        started.append(real_start(job))
        return started[-1]

    def spy(name: str, real: Any) -> Any:
        def send(pid: int, signum: int) -> None:
            if started and pid == started[0].pid and started[0].returncode is not None:
                late.append((name, signum))
            real(pid, signum)

        return send

    monkeypatch.setattr(CommandJob, "_start", start)
    monkeypatch.setattr(os, "kill", spy("kill", os.kill))
    monkeypatch.setattr(os, "killpg", spy("killpg", os.killpg))
    assert main(["run", "--schedule", str(schedule), "--timeout", "60", "--", "true"]) == 0
    assert started and started[0].returncode == 0
    assert late == []


# -- World workers ---------------------------------------------------------------------------
WORLD_SCRIPT = """
import json, os, sys, time
import chaoslight

world = chaoslight.World(size=2, spares=0)
sleeper = os.fork()  # holds the World's pipes open, so only the kernel can tell the workers
if sleeper == 0:
    time.sleep(1000)
    os._exit(0)
print(json.dumps({"workers": world.processes, "sleeper": sleeper}), flush=True)
time.sleep(1000)
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal: Linux")
def test_world_workers_die_with_their_parent(tmp_path: Path) -> None:
    """SIGKILL the process holding a World: its rank workers die too, even with pipes open."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    parent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(WORLD_SCRIPT)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    started: dict[str, Any] = {"workers": [], "sleeper": None}
    try:
        assert parent.stdout is not None
        ready, _, _ = select.select([parent.stdout], [], [], TEST_TIMEOUT_S)
        assert ready, "the World's process never reported its workers"
        started = json.loads(parent.stdout.readline())
        parent.kill()
        parent.wait(timeout=30)
        workers = started["workers"]
        deadline = time.monotonic() + 30
        while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in workers if _running(pid)]
    finally:
        parent.kill()
        parent.wait(timeout=30)
        if parent.stdout is not None:
            parent.stdout.close()
        for pid in [*started["workers"], started["sleeper"]]:
            if isinstance(pid, int) and _running(pid):
                os.kill(pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
