"""The chaoslight command: catalogue listings, usage errors, and `run` end to end."""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import chaoslight
from chaoslight._cli import build_parser, main

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


@pytest.mark.slow
def test_run_torchrun_fires_in_both_ranks(tmp_path: Path) -> None:
    """`chaoslight run -- torchrun --nproc-per-node 2` fires each rank's fault in that rank."""
    schedule = tmp_path / "s.txt"
    schedule.write_text(
        "delay@dist.gradient_allreduce rank=1 step=1 seconds=0.2\n"
        "delay@lightning.on_train_batch_end rank=0 step=2 seconds=0.1\n"
    )
    events = tmp_path / "events"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "chaoslight._cli",
            "run",
            "--schedule",
            str(schedule),
            "--timeout",
            "240",
            "--events-dir",
            str(events),
            "--",
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-port",
            str(free_port()),
            str(REPO / "examples" / "torchrun_train.py"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    fired = [
        (e["rank"], e["site"], e["step"])
        for p in events.glob("*.jsonl")
        for e in map(json.loads, p.read_text().splitlines())
        if e["kind"] == "fired"
    ]
    assert sorted(fired) == [
        (0, "lightning.on_train_batch_end", 2),
        (1, "dist.gradient_allreduce", 1),
    ], result.stdout[-2000:] + result.stderr[-4000:]
    assert "rank 1 step   1 fired    delay@dist.gradient_allreduce" in result.stderr
