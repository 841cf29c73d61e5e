"""The user's files survive a fault that damages them: a half-written ``torch.save`` is put
back when the run ends, unless the program itself wrote the file again."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from user_files_targets import TARGETS, users_model

import chaoslight
from chaoslight import Failure, Schedule
from chaoslight._cli import build_parser, main
from chaoslight._cli._outputs import Outputs
from chaoslight._report._timeline_html import HTML_MARKER
from chaoslight._runtime._events import FIRED
from chaoslight._search._failure import emit_test

STATE = {"w": torch.arange(1000, dtype=torch.float32)}


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """The user's model file, at an absolute path outside anything chaoslight made."""
    path = tmp_path.absolute() / "project" / "model.pt"
    path.parent.mkdir()
    torch.save({"w": torch.randn(1000)}, path)
    return path


@pytest.fixture
def world_model() -> Iterator[Path]:
    """The user's model file where this process's World ranks look for it."""
    path = users_model(os.getpid())
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"w": torch.randn(1000)}, path)
    yield path
    shutil.rmtree(path.parent, ignore_errors=True)


@pytest.mark.parametrize("fault", ["raise@torch.save exception=OSError", "oom@torch.save"])
def test_a_damaged_model_file_is_byte_identical_after_inject(model: Path, fault: str) -> None:
    """The fault truncates model.pt for the program; after inject() exits it is as it was."""
    before, stat = model.read_bytes(), model.stat()
    # The injected exception propagates out of inject(): the restoring happens anyway.
    with (
        pytest.raises((OSError, torch.OutOfMemoryError)) as caught,
        chaoslight.inject(fault) as run,
    ):
        try:
            torch.save(STATE, model)
        finally:
            seen = model.read_bytes()
    assert isinstance(caught.value, torch.OutOfMemoryError) == fault.startswith("oom")
    assert [e.site for e in run.fired()] == ["torch.save"]
    assert 0 < len(seen) < len(before)  # the program saw the half-written file
    assert model.read_bytes() == before
    assert model.stat().st_mtime_ns == stat.st_mtime_ns


def test_a_file_the_fault_created_is_gone_afterwards(tmp_path: Path) -> None:
    """A half-written file where there was none is there for the program, then removed."""
    path = tmp_path.absolute() / "new.pt"
    with chaoslight.inject("raise@torch.save exception=OSError"):
        with pytest.raises(OSError):
            torch.save(STATE, path)
        assert path.exists()
        with pytest.raises(RuntimeError):
            torch.load(path)
    assert not path.exists()


def test_a_file_the_program_rewrote_is_left_as_the_program_wrote_it(model: Path) -> None:
    """After the fault the program saves again, successfully: that file is the program's."""
    with chaoslight.inject("raise@torch.save exception=OSError times=1") as run:
        with pytest.raises(OSError):
            torch.save(STATE, model)
        torch.save(STATE, model)
    written = model.read_bytes()
    assert len(run.fired()) == 1
    assert torch.equal(torch.load(model)["w"], STATE["w"])
    assert model.read_bytes() == written


@pytest.mark.slow
def test_the_world_parent_restores_a_file_a_crashed_rank_damaged(
    world2: Any, world_model: Path
) -> None:
    """crash@torch.save kills rank 0 mid-save; after the example model.pt is as it was."""
    before = world_model.read_bytes()
    outcome = world2.run(TARGETS + "resaves_the_users_model", "crash@torch.save rank=0")
    assert outcome.ranks[0].status == "crashed"
    assert [(e.site, e.rank) for e in outcome.events if e.kind == FIRED] == [("torch.save", 0)]
    assert world_model.read_bytes() == before


@pytest.mark.slow
def test_a_restart_sees_the_damage_and_the_job_ends_restored(
    world2: Any, world_model: Path
) -> None:
    """The restarted run finds model.pt truncated; after the last run it is as it was."""
    before = world_model.read_bytes()
    schedule = Schedule.parse("restarts 1\nraise@torch.save rank=0 exception=OSError")
    outcome = world2.run(TARGETS + "resaves_the_users_model", schedule)
    assert [a.ranks[0].status for a in outcome.attempts] == ["failed"]
    assert outcome.status == "passed"
    assert 0 < outcome.ranks[0].value < len(before)  # what the restart found: half of it
    assert world_model.read_bytes() == before


@pytest.mark.slow
def test_chaoslight_run_restores_a_file_its_jobs_crash_damaged(
    model: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A job killed by crash@torch.save mid-save: after `chaoslight run`, model.pt as it was."""
    before = model.read_bytes()
    schedule = tmp_path / "schedule.txt"
    schedule.write_text("crash@torch.save\n")
    save = f"import torch; torch.save({{'w': torch.ones(9)}}, {str(model)!r})"
    assert main(["run", "--schedule", str(schedule), "--", sys.executable, "-c", save]) == 137
    assert "fired    crash@torch.save" in capfd.readouterr().err
    assert model.read_bytes() == before


# -- fuzz's own outputs: --out, the page beside it, --emit-test -------------------------


def _fuzz_args(tmp_path: Path, *extra: str) -> list[str]:
    return ["fuzz", "train.py:main", "--out", str(tmp_path / "found.json"), *extra]


@pytest.mark.parametrize(
    ("name", "extra"),
    [
        ("found.json", ()),
        ("found.html", ()),
        ("test_found.py", ("--emit-test", "{tmp}/test_found.py")),
    ],
)
def test_fuzz_refuses_an_output_path_holding_a_users_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, extra: tuple[str, ...]
) -> None:
    """A file chaoslight did not write at --out, its page or --emit-test: exit 2, one line."""
    users = tmp_path / name
    users.write_text("the user's own notes\n")
    args = _fuzz_args(tmp_path, *(e.format(tmp=tmp_path) for e in extra))
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not overwrite" in err and str(users) in err
    assert users.read_text() == "the user's own notes\n"


def test_fuzz_accepts_output_paths_holding_chaoslights_own_files(tmp_path: Path) -> None:
    """A failure file, page and test from an earlier fuzz may be overwritten."""
    failure = Failure(Schedule.parse("oom@torch.save"), "train.py:main")
    failure.save(tmp_path / "found.json")
    (tmp_path / "found.html").write_text(f"<!doctype html>\n<html><head>{HTML_MARKER}\n")
    emit_test(failure, tmp_path / "test_found.py")
    args = _fuzz_args(tmp_path, "--emit-test", str(tmp_path / "test_found.py"))
    outputs = Outputs(build_parser().parse_args(args))
    assert outputs.failure_file() == tmp_path / "found.json"
    assert outputs.page() == tmp_path / "found.html"
    assert outputs.test_file() == tmp_path / "test_found.py"


def test_a_users_file_that_appears_during_the_campaign_is_written_beside(tmp_path: Path) -> None:
    """Files that appear after the check: the results go beside them, under another name."""
    said: list[str] = []
    args = _fuzz_args(tmp_path, "--emit-test", str(tmp_path / "test_found.py"))
    outputs = Outputs(build_parser().parse_args(args), say=said.append)
    for name in ("found.json", "test_found.py"):
        (tmp_path / name).write_text("the user's\n")
    assert outputs.failure_file() == tmp_path / "found.1.json"
    assert outputs.test_file() == tmp_path / "test_found.1.py"
    assert len(said) == 2 and all("writing" in line and "instead" in line for line in said)
    (tmp_path / "found.1.html").write_text("the user's page\n")
    assert outputs.page() is None and "no timeline written" in said[-1]
    assert {p.read_text() for p in tmp_path.iterdir()} == {"the user's\n", "the user's page\n"}


def test_replay_refuses_an_html_path_holding_a_users_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`replay FILE --html PAGE` with a user's file at PAGE: exit 2, one line, file kept."""
    failure = tmp_path / "found.json"
    Failure(Schedule.parse("oom@torch.save"), "train.py:main").save(failure)
    page = tmp_path / "page.html"
    page.write_text("<html>the user's page</html>\n")
    assert main(["replay", str(failure), "--html", str(page)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--html" in err and "not overwrite" in err
    assert page.read_text() == "<html>the user's page</html>\n"
