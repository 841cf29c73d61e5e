"""The chaoslight command: catalogue listings, usage errors, and `run` end to end."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import chaoslight
from chaoslight._cli import build_parser, main
from chaoslight._cli._usage import ENVIRONMENT_STATUS

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_sites_lists_every_site_one_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    """`chaoslight sites` prints each catalogue site on its own line with its description."""
    assert main(["sites"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = [line.split()[0] for line in lines if line.strip()]
    assert names == list(chaoslight.sites())


def test_faults_lists_every_kind(capsys: pytest.CaptureFixture[str]) -> None:
    """`chaoslight faults` prints each fault kind by its text-form name."""
    assert main(["faults"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert names == list(chaoslight.faults())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "required"),
        (["bogus"], "invalid choice: 'bogus'"),
        (["run", "--", "true"], "--schedule"),
        (["run", "--schedule", "/no/such/file", "--", "true"], "cannot read schedule file"),
        (["run", "--schedule", "{bad}", "--", "true"], "cannot read schedule file"),
        (["run", "--schedule", "SCHEDULE"], "needs a command after --"),
        (["run", "--schedule", "SCHEDULE", "--timeout", "0", "--", "true"], "--timeout=0"),
        (["run", "--schedule", "BAD_SCHEDULE", "--", "true"], "not a known site"),
        (["run", "--schedule", "SCHEDULE", "--events-dir", "SCHEDULE", "--", "true"], "a file"),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every usage error exits 2 and prints exactly one line naming the problem, no traceback."""
    good = tmp_path / "good.txt"
    good.write_text("delay@lightning.training_step seconds=0.01\n")
    bad = tmp_path / "bad.txt"
    bad.write_text("delay@lightning.trainng_step\n")
    argv = [str(good) if a == "SCHEDULE" else str(bad) if a == "BAD_SCHEDULE" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert message in err[0]
    assert "Traceback" not in err[0]


@pytest.mark.parametrize("command", ["fuzz", "replay", "run"])
def test_every_option_has_help_that_says_its_default(command: str) -> None:
    """`chaoslight COMMAND --help` explains every option and shows each default value."""
    parser = subcommand(command)
    formatter = parser._get_formatter()
    for action in parser._actions:
        if not action.option_strings or action.default == argparse.SUPPRESS:
            continue
        shown = formatter._expand_help(action) if action.help else ""
        assert shown, f"{command} {action.option_strings[0]} has no help"
        if action.default in (False, []):
            continue  # a flag or a repeatable option: not given means none
        if action.default is None:
            assert "default" in shown or "required" in shown, shown
        else:
            value = f"{action.default:g}" if isinstance(action.default, float) else action.default
            assert f"default: {value}" in shown, shown


def subcommand(name: str) -> argparse.ArgumentParser:
    """The sub-parser of ``chaoslight NAME``."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return commands.choices[name]


def test_console_script_exits_2_without_traceback(tmp_path: Path) -> None:
    """The installed entry point maps a usage error to exit status 2 and one stderr line."""
    result = subprocess.run(
        [sys.executable, "-c", "from chaoslight._cli import entry; entry()", "run", "--", "x"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


@pytest.mark.slow
def test_run_arms_plain_python_process_and_merges_events(tmp_path: Path) -> None:
    """`chaoslight run -- python script` fires the schedule inside an unmodified script."""
    script = tmp_path / "script.py"
    script.write_text(
        "import torch\n"
        "try:\n"
        "    torch.save({'a': 1}, 'out.pt')\n"
        "except OSError as exc:\n"
        "    print('caught', exc.errno)\n"
    )
    schedule = tmp_path / "s.txt"
    schedule.write_text('raise@torch.save exception=OSError args=[28,"No space left on device"]\n')
    events = tmp_path / "events"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "chaoslight._cli",
            "run",
            "--schedule",
            str(schedule),
            "--events-dir",
            str(events),
            "--",
            sys.executable,
            str(script),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "caught 28" in result.stdout
    assert "fired    raise@torch.save" in result.stderr
    logged = [
        json.loads(line) for p in events.glob("*.jsonl") for line in p.read_text().splitlines()
    ]
    assert [e["site"] for e in logged if e["kind"] == "fired"] == ["torch.save"]


def run_under_torchrun(schedule: Path, script: Path, cwd: Path) -> tuple[Any, list[Any]]:
    """``chaoslight run --schedule S -- torchrun --nproc-per-node 2 SCRIPT``: the result and
    the (rank, site, step) of every fired event in the ranks' logs."""
    events = cwd / "events"
    result = subprocess.run(
        [
            *(sys.executable, "-m", "chaoslight._cli", "run", "--schedule", str(schedule)),
            *("--timeout", "240", "--events-dir", str(events), "--"),
            *(sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"),
            *("--master-port", str(free_port()), str(script)),
        ],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )
    fired = [
        (e["rank"], e["site"], e["step"])
        for p in events.glob("*.jsonl")
        for e in map(json.loads, p.read_text().splitlines())
        if e["kind"] == "fired"
    ]
    return result, sorted(fired)


@pytest.mark.slow
def test_run_torchrun_fires_in_both_ranks(tmp_path: Path) -> None:
    """`chaoslight run -- torchrun --nproc-per-node 2` fires each rank's fault in that rank."""
    schedule = tmp_path / "s.txt"
    schedule.write_text(
        "delay@dist.gradient_allreduce rank=1 step=1 seconds=0.2\n"
        "delay@lightning.on_train_batch_end rank=0 step=2 seconds=0.1\n"
    )
    script = REPO / "examples" / "torchrun_train.py"
    result, fired = run_under_torchrun(schedule, script, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert fired == [
        (0, "lightning.on_train_batch_end", 2),
        (1, "dist.gradient_allreduce", 1),
    ], result.stdout[-2000:] + result.stderr[-4000:]
    assert "rank 1 step   1 fired    delay@dist.gradient_allreduce" in result.stderr


@pytest.mark.slow
def test_run_arms_a_plain_pytorch_script_under_torchrun_at_its_loop_steps(tmp_path: Path) -> None:
    """A script with no Lightning, its own init_process_group, unchanged: the faults fire
    at the loop's steps (its optimizer steps), on the ranks the schedule names."""
    schedule = REPO / "examples" / "schedules" / "plain_straggler.txt"
    result, fired = run_under_torchrun(schedule, REPO / "examples" / "torchrun_plain.py", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert fired == [(0, "dist.all_reduce", 2), (1, "torch.optimizer_step", 1)], (
        result.stdout[-2000:] + result.stderr[-4000:]
    )
    assert "rank 0: loss" in result.stdout and "rank 1: loss" in result.stdout


# -- fuzz and replay: what they print about a failure, and the timeline ----------------------
def two_rank_failure() -> tuple[Any, Any]:
    """A verdict and an outcome as a traced replay returns them: rank 1 raised by a fault
    (its traceback through torch's frames), rank 0 was released in collective #2."""
    from chaoslight import Event, Outcome, Verdict
    from chaoslight._world import ExceptionInfo, RankResult

    library = f"{torch_folder()}/nn/modules/module.py"
    traceback = (
        "Traceback (most recent call last):\n"
        '  File "/home/me/train.py", line 9, in train\n    fit()\n'
        f'  File "{library}", line 1, in _call_impl\n    return forward_call()\n'
        f'  File "{library}", line 2, in forward\n    raise RuntimeError("injected")\n'
        "RuntimeError: injected by chaoslight\n"
    )
    events = [
        Event(kind, site, rank, 0, 10.0 + t, 0.0, "", call, detail, 1)
        for rank in (0, 1)
        for kind, site, t, call, detail in (
            ("enter", "dist.all_reduce", 0.0, 1, "#1"),
            ("exit", "dist.all_reduce", 0.01, 1, ""),
            ("enter", "dist.barrier", 0.02, 1, "#2"),
            ("exit", "dist.barrier", 0.05, 1, "raised RuntimeError" if rank == 0 else ""),
        )
    ]
    fault = "raise@lightning.training_step rank=1 step=0"
    events.append(Event("fired", "lightning.training_step", 1, 0, 10.03, 0.0, fault, 1, "", 1))
    ranks = (
        RankResult(0, "released", ExceptionInfo("RuntimeError", "gloo closed", "gloo tb", True)),
        RankResult(1, "failed", ExceptionInfo("RuntimeError", "injected by chaoslight", traceback)),
    )
    outcome = Outcome("failed", ranks, events, 0.2, chaoslight.Schedule.parse(fault), "t.py:train")
    reason = "rank 1 raised by the fault; consequence: rank 0 was released"
    return Verdict(True, reason, "failed"), outcome


def torch_folder() -> str:
    import torch

    return str(Path(torch.__file__).parent)


def test_replay_says_the_reason_once_and_writes_the_timeline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """replay prints the reason once, the schedule, the root cause's traceback without
    library frames, and the per-rank table; --html writes the page and prints its path."""
    from chaoslight._cli import _replay

    seen: dict[str, Any] = {}

    def traced_replay(failure: Any, **options: Any) -> tuple[Any, Any]:
        seen.update(options)
        return two_rank_failure()

    monkeypatch.setattr(_replay, "replay", traced_replay)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("def train():\n    pass\n")
    failure_file = tmp_path / "f.json"
    chaoslight.Failure(chaoslight.Schedule(), "t.py:train").save(failure_file)
    page = tmp_path / "page.html"
    assert main(["replay", str(failure_file), "--html", str(page)]) == 1
    out = capsys.readouterr().out
    assert seen["trace"] is True
    assert out.count("rank 1 raised by the fault") == 1, out
    assert "1 frame of torch, Lightning and chaoslight hidden" in out
    assert '/home/me/train.py", line 9' in out and "_call_impl" not in out
    assert 'raise RuntimeError("injected")' in out and "gloo tb" not in out
    assert re.search(r"#2 barrier \(raised RuntimeError\) +#2 barrier", out), out
    assert f"timeline: {page}" in out and page.read_text().count("class='lane'") == 2


def test_fuzz_writes_the_timeline_beside_the_failure_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """fuzz replays the failure once more, traced, on its own World, and writes
    ``<out>.html``; --no-html skips both; --strict reaches the search."""
    from chaoslight._cli import _fuzz
    from chaoslight._search._campaign import FOUND, Result

    verdict, outcome = two_rank_failure()
    searched: list[dict[str, Any]] = []
    traced: list[dict[str, Any]] = []

    def search(target: str, settings: Any, **options: Any) -> tuple[Any, Any]:
        searched.append({**options, "strict": settings.strict})
        result = Result(FOUND, outcome.schedule, verdict, outcome, examples=5)
        return result, chaoslight.Failure(outcome.schedule, target, reason=verdict.reason)

    def replay(failure: Any, **options: Any) -> tuple[Any, Any]:
        traced.append(options)
        return verdict, outcome

    monkeypatch.setattr(_fuzz, "World", lambda size: contextlib.nullcontext(f"World({size})"))
    monkeypatch.setattr(_fuzz, "fuzz", search)
    monkeypatch.setattr(_fuzz, "replay", replay)
    (tmp_path / "t.py").write_text("def train():\n    pass\n")  # the target must exist
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "found.json"
    assert main(["fuzz", "t.py:train", "--out", str(out), "--strict"]) == 1
    printed = capsys.readouterr().out
    assert searched[-1]["strict"] is True and searched[-1]["world"] == "World(2)"
    assert traced == [{"world": "World(2)", "trace": True}]
    assert f"timeline: {tmp_path / 'found.html'}" in printed
    assert (tmp_path / "found.html").exists() and "#2 barrier" in printed
    (tmp_path / "found.html").unlink()
    assert main(["fuzz", "t.py:train", "--out", str(out), "--no-html"]) == 1
    assert len(traced) == 1 and not (tmp_path / "found.html").exists()
    assert searched[-1]["strict"] is False


def test_plain_progress_ends_with_the_summary_counts_and_says_so_on_ctrl_c() -> None:
    """In a CI log the last progress line has the final count (the summary's), and a
    campaign stopped by Ctrl-C still prints how far it got."""
    from rich.console import Console

    from chaoslight._cli._progress import Display
    from chaoslight._search import Progress

    console = Console(file=io.StringIO(), force_terminal=False, width=200)
    progress = Progress(phase="generating")
    with pytest.raises(KeyboardInterrupt), Display("t.py:train", console) as display:
        for count in range(1, 7):
            progress.examples = count
            display.update(progress)  # one line per phase, or every few seconds
        raise KeyboardInterrupt
    lines = console.file.getvalue().splitlines()
    assert lines[-2] == "[generating] examples=6 failure found=no rate=" + lines[-2].split("=")[-1]
    assert lines[-1].startswith("chaoslight fuzz: interrupted (Ctrl-C) during generating, after 6")
    assert lines[-1].endswith("no failure found so far")


def test_live_panel_keeps_a_long_title_on_one_line() -> None:
    """On a narrow terminal the panel's title is cut with an ellipsis, never wrapped."""
    from rich.console import Console

    from chaoslight._cli._progress import Display
    from chaoslight._search import Progress

    console = Console(file=io.StringIO(), force_terminal=True, width=40, color_system=None)
    with Display("/a/very/long/path/to/the/training/script.py:train", console) as display:
        display.update(Progress(phase="shrinking", examples=12, failures=1))
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", console.file.getvalue())
    frame = text.split("chaoslight fuzz")[-1].splitlines()
    assert frame[0].endswith("…") and len("chaoslight fuzz" + frame[0]) <= 40
    assert [line.split()[:2] for line in frame[1:5]] == [
        ["phase", "shrinking"],
        ["examples", "12"],
        ["failure", "found"],
        ["examples/min", frame[4].split()[1]],
    ]


def test_shrinking_reruns_do_not_count_as_new_failures() -> None:
    """The panel's failure count is 1 once a failure is found, however often shrinking
    reruns failing schedules."""
    from chaoslight import Settings, Verdict
    from chaoslight._search import Campaign
    from chaoslight.strategies import schedules

    failing_runs = 0

    def runner(schedule: Any, fresh: bool = False) -> tuple[Verdict, None]:
        nonlocal failing_runs
        bad = any(f.kind == "oom" for f in schedule)
        failing_runs += bad
        return Verdict(bad, "boom" if bad else "", "failed" if bad else "passed"), None

    strategy = schedules(world_size=2, steps=4, faults=["oom", "delay"], max_faults=3)
    counts: list[int] = []
    Campaign(
        runner,
        strategy,
        Settings(max_examples=100, seed=2, replays=1),
        on_progress=lambda progress: counts.append(progress.failures),
    ).execute()
    assert failing_runs > 2 and max(counts) == 1 and counts[-1] == 1


@pytest.mark.slow
def test_a_check_that_raises_while_judging_is_an_internal_error_not_a_finding(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    lend_world2: Callable[[Any], None],
) -> None:
    """A bug in a check's judge ends the command with exit 3 and the check named: never
    exit 1 (a finding), never a bare traceback alone."""
    lend_world2(chaoslight._search)  # `check` runs its baseline on the session's World

    def broken(self: Any, evidence: Any) -> Any:
        raise KeyError("rows")

    monkeypatch.setattr(chaoslight.checks.DisjointShards, "judge", broken)
    target = f"{Path(__file__).resolve().parent.parent}/examples/ddp_train.py:train"
    assert main(["check", target, "--timeout", "30"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("chaoslight: INTERNAL ERROR of chaoslight: CheckJudgeError: ")
    assert "check 'disjoint-shards' raised while judging: KeyError: 'rows'" in err


def test_workers_that_cannot_start_exit_4_not_usage_or_internal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rank processes that die before their handshake: exit 4 (the machine), not 2 nor 3."""
    monkeypatch.setattr(
        sys, "executable", shutil.which("false") or "/bin/false"
    )  # every worker exits at once
    target = f"{REPO}/examples/ddp_train.py:train"
    assert main(["check", target, "--timeout", "30"]) == ENVIRONMENT_STATUS == 4
    err = capsys.readouterr().err
    # the rank's worker, or the fork server it comes from, where ranks are forked
    assert re.match(r"chaoslight: error: World (worker|fork server) for rank 0 exited", err), err
    assert "INTERNAL ERROR" not in err and "Traceback" not in err
