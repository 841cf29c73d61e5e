"""chaoslight fuzz / replay end to end, usage errors, and the quality of the search."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import ddp_targets
import pytest

from chaoslight import Event, Failure, Outcome, Schedule
from chaoslight._cli import _fuzz as fuzz_cli
from chaoslight._cli import main
from chaoslight._report._status import RANK_STATUSES
from chaoslight._runtime import FIRED
from chaoslight._search import Campaign
from chaoslight._search import _campaign as campaign_module
from chaoslight._search._database import in_shard
from chaoslight._search._inprocess import in_process_runner, run_in_process
from chaoslight.checks import ErrorsSurface
from chaoslight.strategies import schedules

ROOT = Path(__file__).resolve().parent.parent
SWALLOWED = f"{ROOT}/examples/planted/swallowed_oom.py"
TWO_RANKS = f"{ROOT}/examples/planted/two_rank_skips.py"
USER_SITES = "lightning.training_step,lightning.forward,lightning.backward,lightning.optimizer_step"
MINIMAL = "minimal failing schedule (every fault in it is needed):"


def swallowed_fuzz(function: str, max_examples: int, *extra: str) -> list[str]:
    """The fuzz arguments both swallowed-OOM tests share: OOMs at the user's own sites."""
    return [
        "fuzz",
        f"{SWALLOWED}:{function}",
        "--faults",
        "oom",
        "--sites",
        USER_SITES,
        "--max-examples",
        str(max_examples),
        "--seed",
        "3",
        "--timeout",
        "5",
        *extra,
    ]


def chaoslight(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chaoslight._cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=540,
    )


@dataclass
class Ran:
    """What a ``chaoslight`` command run in this process printed, and its exit status."""

    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def fuzz_here(
    lend_world2: Callable[[Any], None],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Callable[..., Ran]:
    """``chaoslight fuzz`` run by the CLI's ``main`` in this process, on the session's World
    instead of one of its own: the same parsing, search, report and exit status, without
    the seconds a new World spends importing (``test_fuzz_finds_shrinks_and_replays_*``
    runs the real command in a subprocess)."""
    lend_world2(fuzz_cli)

    def run(*args: str, cwd: Path) -> Ran:
        monkeypatch.chdir(cwd)
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return Ran(code, out, err)

    return run


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["fuzz"], "required: target"),
        (["fuzz", "nofile.py:train"], "no such file"),
        (["fuzz", "justaname"], "justaname"),
        (["fuzz", f"{SWALLOWED}:train", "--faults", "oomm"], "did you mean 'oom'"),
        (["fuzz", f"{SWALLOWED}:train", "--sites", "lightning.fwd"], "not a known site"),
        (["fuzz", f"{SWALLOWED}:train", "--check", "replicas"], "is not a check"),
        (["fuzz", f"{SWALLOWED}:train", "--world-size", "0"], "world-size=0"),
        (["fuzz", f"{SWALLOWED}:train", "--max-examples", "0"], "max-examples=0"),
        (["fuzz", f"{SWALLOWED}:train", "--timeout", "0"], "timeout=0"),
        (["fuzz", f"{SWALLOWED}:train", "--mode", "survive"], "unrecognized arguments: --mode"),
        (["fuzz", f"{SWALLOWED}:train", "--no-check", "finite-grads"], "not a default check"),
        (["check", "nofile.py:train"], "no such file"),
        (["replay", "/no/such.json"], "cannot read"),
        (["replay", "SCHEDULE"], "names no target"),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    argv: list[str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each usage error of fuzz/replay exits 2 with one line naming the problem, before
    any World starts."""

    def no_world(*args: object, **kwargs: object) -> None:
        raise AssertionError("a usage error started a World")

    monkeypatch.setattr(fuzz_cli, "World", no_world)
    schedule = tmp_path / "s.txt"
    schedule.write_text("oom@lightning.forward rank=0 step=0\n")
    argv = [str(schedule) if a == "SCHEDULE" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


@pytest.mark.slow
def test_fuzz_finds_shrinks_and_replays_a_swallowed_oom(tmp_path: Path) -> None:
    """fuzz exits 1 with the one-fault minimal schedule; replay and the emitted test reproduce."""
    found = chaoslight(
        *swallowed_fuzz("train", 60, "--emit-test", "test_regression.py"), cwd=tmp_path
    )
    assert found.returncode == 1, found.stdout + found.stderr
    lines = found.stdout.splitlines()
    schedule = lines[lines.index(MINIMAL) + 1 :][:1]
    assert schedule == ["  oom@lightning.forward rank=0 step=0"]
    assert f"replay: chaoslight replay chaoslight-failure.json {SWALLOWED}:train" in found.stdout
    saved = json.loads((tmp_path / "chaoslight-failure.json").read_text())
    assert saved["target"] == f"{SWALLOWED}:train" and saved["world_size"] == 2
    # The command fuzz printed: the target is named, as it lies outside tmp_path.
    again = chaoslight("replay", "chaoslight-failure.json", f"{SWALLOWED}:train", cwd=tmp_path)
    assert again.returncode == 1 and "replay: still fails" in again.stdout
    emitted = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-W",
            "ignore",
            "test_regression.py",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert emitted.returncode == 1, (
        emitted.stdout
    )  # the regression test fails while the bug is there


@pytest.mark.slow
def test_fuzz_passes_the_fixed_twin_after_the_full_budget(tmp_path: Path) -> None:
    """On the fixed twin fuzz runs every example of its budget and exits 0; Hypothesis's
    observability lines, when asked for, show each example as its schedule's text with
    the verdict and each rank's status."""
    observing = {
        **os.environ,
        "HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY": "1",
        "HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY_NOCOVER": "1",
    }
    clean = chaoslight(*swallowed_fuzz("train_fixed", 8), cwd=tmp_path, env=observing)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    lines = [
        json.loads(line)
        for path in (tmp_path / ".hypothesis" / "observed").glob("*_testcases.jsonl")
        for line in path.read_text().splitlines()
    ]
    runs = [line for line in lines if "verdict" in line["features"]]
    assert runs, lines
    for line in runs:
        assert "schedule=Schedule.parse(" in line["representation"], line["representation"]
        assert line["features"]["verdict"] == "passed"
        statuses = {line["features"]["rank 0"], line["features"]["rank 1"]}
        assert statuses <= set(RANK_STATUSES), line["features"]
        if "hung" in statuses:  # a correct program hangs only by Lightning's known bug
            assert line["features"]["known issue"].startswith("lightning-sigterm"), line
    assert re.search(r"no failure in \d+ examples", clean.stdout), clean.stdout


@pytest.mark.quality
@pytest.mark.usefixtures("lightning_in_process")
def test_quality_in_process_swallowed_oom_shrinks_to_one_fault() -> None:
    """In-process, an OOM swallowed and failing later is found and shrunk to one fault."""
    strategy = schedules(
        world_size=1, steps=4, faults=["oom"], sites=USER_SITES.split(","), in_process=True
    )
    result = Campaign(
        in_process_runner(ddp_targets.skips_then_asserts, [ErrorsSurface()]),
        strategy,
        max_examples=80,
        seed=5,
        replays=2,
    ).execute()
    assert result.status == "failed"
    assert result.schedule is not None
    assert result.schedule.to_text() == "oom@lightning.forward rank=0 step=0"
    assert result.examples <= 120


@pytest.mark.quality
@pytest.mark.slow
def test_quality_an_oom_on_every_rank_at_once_is_found_by_the_probes(
    tmp_path: Path, fuzz_here: Callable[..., Ran]
) -> None:
    """At world size 2 the bug that needs OOMs on both ranks is found by the all-ranks probe:
    one OOM that fires on every rank at the same step."""
    found = fuzz_here(
        "fuzz",
        f"{TWO_RANKS}:train",
        "--faults",
        "oom",
        "--sites",
        "lightning.forward",
        "--max-examples",
        "200",
        "--seed",
        "1",
        "--timeout",
        "5",
        cwd=tmp_path,
    )
    assert found.returncode == 1, found.stdout + found.stderr
    lines = found.stdout.splitlines()
    start = lines.index(MINIMAL) + 1
    # The probes try an OOM on every rank at once: one fault that fires on both ranks.
    assert lines[start : start + 1] == ["  oom@lightning.forward step=0"]
    assert lines[start + 1].startswith("failure: ")
    examples = int(found.stdout.split("failure after ")[1].split()[0])
    assert examples <= 20  # found by the probes, before the random search


BROKEN = """
import sys

def needs_an_argument(x):
    return x

def exits():
    sys.exit(3)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("function", "error"),
    [
        ("needs_an_argument", "TypeError"),
        ("exits", "SystemExit: 3"),
    ],
)
def test_a_broken_target_is_reported_as_failing_with_no_fault(
    tmp_path: Path, function: str, error: str, fuzz_here: Callable[..., Ran]
) -> None:
    """A target broken on its own is reported with its own error and the empty schedule,
    never with some fault called minimal."""
    (tmp_path / "broken.py").write_text(BROKEN)
    found = fuzz_here(
        "fuzz", f"{tmp_path}/broken.py:{function}", "--max-examples", "5", "--replays", "0",
        cwd=tmp_path,
    )  # fmt: skip
    assert found.returncode == 1, found.stdout + found.stderr
    assert "the target fails with no fault injected" in found.stdout
    assert "no fault needed (empty schedule)" in found.stdout
    assert error in found.stdout.split("failure: ")[1]
    assert "minimal failing schedule" not in found.stdout


RACY = """
import os
from pathlib import Path

def every_other_run():
    # Each rank counts its runs in a file beside this one: every second run fails, as a
    # race of the program's own would, with no fault injected.
    counter = Path(__file__).with_name(f"runs-{os.environ['RANK']}.txt")
    runs = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(runs))
    if runs % 2 == 0:
        raise RuntimeError(f"lost the race in run {runs}")
"""


@pytest.mark.slow
def test_a_target_that_fails_in_some_runs_with_no_fault_is_a_finding(
    tmp_path: Path, fuzz_here: Callable[..., Ran]
) -> None:
    """A failure seen with no fault in some runs only is the program's own race: exit 1,
    labelled flaky with its rate, never the green exit of a flaky fault."""
    (tmp_path / "racy.py").write_text(RACY)
    found = fuzz_here(
        "fuzz", f"{tmp_path}/racy.py:every_other_run", "--max-examples", "5", "--replays", "2",
        cwd=tmp_path,
    )  # fmt: skip
    assert found.returncode == 1, found.stdout + found.stderr
    assert "flaky with no fault injected: it failed in 2 of 4 runs with no fault" in found.stdout
    assert "lost the race" in found.stdout.split("failure: ")[1]


@pytest.mark.slow
def test_max_time_bounds_the_campaign_and_the_coverage_is_printed(
    tmp_path: Path, fuzz_here: Callable[..., Ran]
) -> None:
    """--max-time ends the campaign with its best result, well before the example budget;
    the summary says what was explored."""
    started = time.monotonic()
    clean = fuzz_here(
        "fuzz", f"{SWALLOWED}:train_fixed", "--max-examples", "100000", "--max-time", "4",
        cwd=tmp_path,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert elapsed < 4 + 60  # the World's start and the example in flight, with a wide margin
    assert re.search(r"explored: faults at \d+ of \d+ reached \(site, step\) points", clean.stdout)
    assert "kinds tried:" in clean.stdout


# A few quick runs on the stand-in World below: no replay, no timeline, stragglers only.
STAND_IN = ["--replays", "0", "--no-html", "--max-examples", "5", "--faults", "delay"]


class FailsWithAnyFault:
    """Stands in for ``World`` in the fuzz command: each run happens in this process, and
    the program fails whenever its schedule has a fault (no rank process starts)."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __enter__(self) -> FailsWithAnyFault:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def run(self, target: str, schedule: Schedule, **options: Any) -> Outcome:
        def program() -> None:
            if schedule.faults:
                raise RuntimeError("the program's own bug")

        outcome = run_in_process(program, schedule)
        # Its faults fired (a failure that needs a fault that never fired is flaky).
        fired = [Event(FIRED, f.site, 0, f.step, 0.0, 0.0, str(f), 1) for f in schedule]
        return replace(outcome, events=[*outcome.events, *fired])


def test_an_unreachable_database_warns_once_without_its_password_and_the_file_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """fuzz --database redis://:secret@… with nobody there: one warning that never shows
    the password, the search goes on, and its failure file is written (exit 1)."""
    monkeypatch.setattr(fuzz_cli, "World", FailsWithAnyFault)
    out = tmp_path / "found.json"
    status = main(
        ["fuzz", f"{SWALLOWED}:train", "--database", "redis://:secret@127.0.0.1:1/0",
         "--out", str(out), "--seed", "1", *STAND_IN]
    )  # fmt: skip
    shown = capsys.readouterr()
    assert status == 1 and out.exists(), shown
    warnings = [line for line in shown.err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "redis://:***@127.0.0.1:1/0" in warnings[0]
    assert "secret" not in shown.out + shown.err + out.read_text()


def test_the_failure_file_is_written_before_the_database_is_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """When fuzz records its failure in --database, the failure file is already on disk: a
    database write that hangs or is interrupted cannot lose it."""
    monkeypatch.setattr(fuzz_cli, "World", FailsWithAnyFault)
    out = tmp_path / "found.json"
    file_there_when_recorded: list[bool] = []
    monkeypatch.setattr(
        campaign_module, "remember", lambda *args: file_there_when_recorded.append(out.exists())
    )
    status = main(
        ["fuzz", f"{SWALLOWED}:train", "--database", str(tmp_path / "db"), "--out", str(out),
         "--seed", "1", *STAND_IN]
    )  # fmt: skip
    assert status == 1, capsys.readouterr()
    assert file_there_when_recorded == [True]


class RecordsRuns(FailsWithAnyFault):
    """The same stand-in, passing every run, and keeping each schedule it ran."""

    ran: list[Schedule] = []

    def run(self, target: str, schedule: Schedule, **options: Any) -> Outcome:
        RecordsRuns.ran.append(schedule)
        return run_in_process(lambda: None, schedule)


def test_a_shard_worker_does_not_replay_another_shards_stored_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """fuzz --shard 1/2 leaves the failure worker 0/2 stored (a fault in the forward, in
    shard 0) to worker 0/2, and searches its own sites."""
    database, out = str(tmp_path / "db"), tmp_path / "found.json"
    worker = [
        "fuzz",
        f"{SWALLOWED}:train",
        "--database",
        database,
        "--out",
        str(out),
        "--seed",
        "1",
    ]
    monkeypatch.setattr(fuzz_cli, "World", FailsWithAnyFault)
    worker += STAND_IN
    assert main([*worker, "--shard", "0/2", "--sites", "lightning.forward"]) == 1
    stored = Failure.load(str(out)).schedule
    assert in_shard(stored, (0, 2)) and not in_shard(stored, (1, 2))
    monkeypatch.setattr(fuzz_cli, "World", RecordsRuns)
    RecordsRuns.ran = []
    assert main([*worker, "--shard", "1/2", "--sites", "lightning.backward"]) == 0
    assert stored not in RecordsRuns.ran and len(RecordsRuns.ran) > 2, capsys.readouterr()
