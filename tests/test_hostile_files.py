"""Hostile files: a failure file, schedule file, CHAOSLIGHT_SCHEDULE or database entry is
data. Each payload goes through the real entry point (`chaoslight replay` in-process, or
the engine and database readers) and nothing it names runs, nothing is imported, and the
answer is one line (exit 2) or a one-line skip, before any World starts."""

from __future__ import annotations

import json
import os
import shutil
import sys
from hashlib import sha256
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis.database import InMemoryExampleDatabase

import chaoslight
import chaoslight._search as search
from chaoslight import InvalidSchedule, Schedule
from chaoslight._cli import main
from chaoslight._runtime import _autostart
from chaoslight._schedule._validate import MAX_SCHEDULE_FAULTS
from chaoslight._search._database import KNOWN_FAILURES, known_failures
from chaoslight._sites import _damage

SENTINEL = "chaoslight_hostile_sentinel"
TARGET = "tests/ddp_targets.py:plain_fit"


class WorldWouldStart(BaseException):
    """Raised by the stand-in World: the replay got past every check of the file."""


class NoWorld:
    """Stands in for ``World`` in ``chaoslight.replay``: records what a run would judge
    with, then stops, so no rank process ever starts in this suite."""

    started: list[Any] = []

    def __init__(self, size: int) -> None:
        self.size = size

    def __enter__(self) -> NoWorld:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def run(self, target: str, schedule: Schedule, **kwargs: Any) -> Any:
        NoWorld.started.append(kwargs["checks"])
        raise WorldWouldStart


@pytest.fixture
def sentinel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A module on sys.path whose import would write a marker file; returns the marker."""
    marker = tmp_path / "IMPORTED"
    folder = tmp_path / "path"
    folder.mkdir()
    (folder / f"{SENTINEL}.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nclass Boom(Exception):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, SENTINEL, raising=False)
    monkeypatch.setattr(search, "World", NoWorld)
    NoWorld.started = []
    return marker


def failure_doc(**fields: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "chaoslight_failure": 2,
        "target": TARGET,
        "world_size": 2,
        "timeout": 10.0,
        "checks": [{"name": "no-hang", "params": {}}],
        "status": "failed",
        "reason": "r",
        "schedule": {"chaoslight_schedule": 1, "faults": []},
    }
    doc.update(fields)
    return doc


def raise_schedule(exception: str) -> dict[str, Any]:
    fault = {"kind": "raise", "site": "torch.save", "exception": exception, "args": []}
    return {"chaoslight_schedule": 1, "faults": [fault]}


def replay(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    """`chaoslight replay FILE TARGET`, in-process: its exit status and its one error line."""
    status = main(["replay", str(path), TARGET, *extra])
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") <= 1, err
    return status, err


def imported_since(before: set[str]) -> set[str]:
    """Modules imported since ``before``, but rich's own (the console loads its tables lazily)."""
    return {name for name in set(sys.modules) - before if not name.startswith("rich.")}


def write(tmp_path: Path, content: Any, name: str = "hostile.json") -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


EXCEPTIONS = [
    "os:system",
    "subprocess:Popen",
    "builtins:exec",
    "builtins:__import__",
    "__import__",
    "importlib:import_module",
    f"{SENTINEL}:Boom",
    "antigravity:Fly",
    "torch.utils.model_dump.__main__:Error",
    ".relative:Error",
]


@pytest.mark.parametrize("exception", EXCEPTIONS)
def test_an_exception_a_failure_file_names_is_never_imported(
    exception: str, tmp_path: Path, sentinel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """raise@torch.save exception=<payload> in a failure file: exit 2 naming the class,
    the module is not imported, nothing ran, no World started."""
    path = write(tmp_path, failure_doc(schedule=raise_schedule(exception)))
    modules = set(sys.modules)
    status, err = replay(path, capsys)
    assert status == 2 and "exception=" in err and repr(exception) in err
    assert not sentinel.exists() and imported_since(modules) == set()
    assert NoWorld.started == []


def test_an_exception_in_a_schedule_file_names_the_fix(
    tmp_path: Path, sentinel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A text schedule naming a module nobody imported is refused with the fix."""
    path = write(tmp_path, f"raise@torch.save exception={SENTINEL}:Boom\n", "s.txt")
    status, err = replay(path, capsys)
    assert status == 2 and "a schedule imports no module" in err and "import it" in err
    assert not sentinel.exists() and SENTINEL not in sys.modules


def test_torch_and_builtin_exceptions_still_replay(
    tmp_path: Path, sentinel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """torch:OutOfMemoryError and OSError pass the parent's checks: the replay goes on."""
    del sentinel
    text = "raise@torch.save exception=torch:OutOfMemoryError\nraise@torch.load exception=OSError"
    with pytest.raises(WorldWouldStart):
        main(["replay", str(write(tmp_path, text, "s.txt")), TARGET])
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("os:system", {"command": "touch MARKER"}),
        ("subprocess:Popen", {"args": ["touch", "MARKER"]}),
        ("builtins:exec", {}),
        (f"{SENTINEL}:Boom", {}),
    ],
)
def test_a_check_a_failure_file_names_by_import_path_is_skipped(
    path: str,
    params: dict[str, Any],
    tmp_path: Path,
    sentinel: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """{"import": "os:system", "params": {"command": ...}}: replay imports and calls
    nothing, says in one line which check it skipped and how to include it, and judges
    with the file's other checks."""
    params = json.loads(json.dumps(params).replace("MARKER", str(sentinel)))
    checks = [{"name": "no-hang", "params": {}}, {"name": "x", "import": path, "params": params}]
    modules = set(sys.modules)
    with pytest.raises(WorldWouldStart):
        main(["replay", str(write(tmp_path, failure_doc(checks=checks))), TARGET])
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "skipped" in line]
    assert "skipped check 'x'" in line and f"--check {path}" in line
    assert not sentinel.exists() and imported_since(modules) == set()
    (judged,) = NoWorld.started
    assert "no-hang" in [check.name for check in judged] and "x" not in str(judged)


@pytest.mark.parametrize("typed", ["os:system", "subprocess:Popen", "builtins:exec"])
def test_a_typed_check_that_is_no_check_is_refused_before_it_is_called(
    typed: str, tmp_path: Path, sentinel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--check os:system is the user's own words, imported; but it is not a check class,
    so it is refused in one line before anything calls it."""
    path = write(tmp_path, failure_doc())
    status, err = replay(path, capsys, "--check", typed)
    assert status == 2 and "is not a check" in err and not sentinel.exists()


def test_a_user_check_is_included_when_the_user_types_it(
    tmp_path: Path, sentinel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--check module:Class includes the file's user check, built with the file's
    parameters, beside the file's registered checks."""
    checks = [
        {"name": "no-hang", "params": {}},
        {"name": "nan", "import": "chaoslight.checks:FiniteLoss", "params": {}},
    ]
    path = write(tmp_path, failure_doc(checks=checks))
    with pytest.raises(WorldWouldStart):
        main(["replay", str(path), TARGET, "--check", "chaoslight.checks:FiniteLoss"])
    assert "skipped" not in capsys.readouterr().out
    (judged,) = NoWorld.started
    assert [type(check).__name__ for check in judged][:2] == ["NoHang", "FiniteLoss"]


def test_the_python_api_warns_and_includes_the_class_given(tmp_path: Path, sentinel: Path) -> None:
    """chaoslight.replay(failure) warns in one line for a user check the file names; with
    user_checks=[FiniteLoss] it judges with that class, built from the file's parameters."""
    checks = [{"name": "nan", "import": "chaoslight.checks:FiniteLoss", "params": {}}]
    failure = chaoslight.Failure.load(write(tmp_path, failure_doc(checks=checks)))
    with (
        pytest.warns(UserWarning, match="skipped check 'nan'") as caught,
        pytest.raises(WorldWouldStart),
    ):
        chaoslight.replay(failure)
    assert "\n" not in str(caught[0].message)
    with pytest.raises(WorldWouldStart):
        chaoslight.replay(failure, user_checks=[chaoslight.checks.FiniteLoss])
    assert isinstance(NoWorld.started[-1][0], chaoslight.checks.FiniteLoss)
    assert not sentinel.exists()


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"chaoslight_failure": 2, "schedule": ' + deep(100_000) + "}", "deeper than 16"),
        ('{"chaoslight_failure": 2, "schedule": ' + deep(40) + "}", "deeper than 16"),
        ("raise@torch.save args=" + deep(100_000), "deeper than 16"),
        (json.dumps(failure_doc(checks=[{"name": "x", "params": json.loads(deep(30))}])), "deep"),
        ('{"chaoslight_failure": 2, "world_size": ' + "9" * 5000 + "}", "digits"),
        (json.dumps(failure_doc(timeout=float("nan"))), "timeout=nan"),
        (json.dumps(failure_doc(timeout=float("inf"))), "timeout=inf"),
        (json.dumps(failure_doc(timeout=-1)), "timeout=-1"),
        (json.dumps(failure_doc(timeout=1e308)), "must be at most"),
        (json.dumps(failure_doc(world_size=1e400)), "world_size=inf"),
        (json.dumps(failure_doc(world_size="2")), "world_size='2'"),
        (json.dumps(failure_doc(world_size=10**6)), "world_size=1000000 must be at most 64"),
        (json.dumps(failure_doc(status=5)), "status=5 must be a string"),
        (json.dumps(failure_doc(target=["os:system"])), "target=['os:system']"),
        (json.dumps(failure_doc(checks={"a": 1})), "checks="),
        (json.dumps(failure_doc(checks=[{"name": 1}])), "checks[0]"),
        (json.dumps(failure_doc(checks=[{"name": "no-hang", "params": {"x": 1}}])), "no-hang"),
        (json.dumps(failure_doc(checks=[{"name": "os:system"}])), "is not a check"),
        ('{"chaoslight_failure": 2, "schedule": [1, 2]}', "must be a JSON object"),
        ('["chaoslight_failure"]', "holds a JSON object, not list"),
        ("restarts 1000000\n", "restarts=1000000 must be at most 3"),
        ("restarts ²\n", "'restarts N'"),
        ('{"chaoslight_schedule": 1, "restarts": 1e400}', "restarts=inf"),
        ("allocate@torch.save nbytes=" + "9" * 400 + "TiB\n", "too large"),
        ("allocate@torch.save nbytes=1e999\n", "nbytes=inf"),
        ("allocate@torch.save nbytes=NaN\n", "nbytes=nan"),
        ("allocate@torch.save nbytes=-1\n", "nbytes=-1"),
        ("allocate@torch.save nbytes=1.5\n", "nbytes=1.5"),
        ("delay@dist.barrier seconds=NaN\n", "seconds=nan"),
        ("delay@dist.barrier seconds=1e999\n", "seconds=inf"),
        ("delay@dist.barrier step=1e400\n", "step=inf"),
        ("delay@dist.barrier nth=" + "9" * 5000 + "\n", "nth="),
        ("preempt@lightning.training_step after=-Infinity\n", "after=-inf"),
    ],
    ids=lambda value: value[:40],
)
def test_a_malformed_number_or_shape_is_a_usage_error(
    content: str, message: str, tmp_path: Path, sentinel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Deep JSON, NaN/inf/negative/huge/non-integer numbers, wrong field types: exit 2
    with one line naming the field (never 3, an internal error), before any World."""
    status, err = replay(write(tmp_path, content), capsys)
    assert status == 2 and message in err, err
    assert NoWorld.started == [] and not sentinel.exists()


def test_a_million_faults_and_a_huge_file_are_refused_fast(
    tmp_path: Path, sentinel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """10^6 faults (a 20 MB file) and one fault more than the bound are refused in one line."""
    del sentinel
    million = write(tmp_path, "delay@dist.barrier\n" * 10**6, "million.txt")
    status, err = replay(million, capsys)
    assert status == 2 and "larger than" in err
    over = write(tmp_path, "delay@dist.barrier\n" * (MAX_SCHEDULE_FAULTS + 1), "over.txt")
    status, err = replay(over, capsys)
    assert status == 2 and f"more than {MAX_SCHEDULE_FAULTS}" in err
    faults = [{"kind": "delay", "site": "dist.barrier"}] * (MAX_SCHEDULE_FAULTS + 1)
    doc = failure_doc(schedule={"chaoslight_schedule": 1, "faults": faults})
    status, err = replay(write(tmp_path, doc), capsys)
    assert status == 2 and f"more than {MAX_SCHEDULE_FAULTS}" in err


@pytest.mark.parametrize(
    "text",
    [
        "allocate@torch.save nbytes=1TiB",
        "allocate@torch.save nbytes=200TiB hold_steps=*",
        "budget limit_bytes=256TiB\nallocate@torch.save nbytes=1TiB",
    ],
)
def test_an_allocation_past_half_the_free_memory_is_refused(
    text: str, tmp_path: Path, sentinel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """1 TiB of real memory on every rank is refused before a World starts; a budget the
    allocation does not fit would make it the simulated OOM, so that one goes on."""
    status, err = replay(write(tmp_path, text, "s.txt"), capsys)
    assert status == 2 and "free" in err and "memory budget" in err
    assert NoWorld.started == [] and not sentinel.exists()
    under_budget = write(tmp_path, "budget limit_bytes=1GiB\n" + text.splitlines()[-1], "b.txt")
    with pytest.raises(WorldWouldStart):
        main(["replay", str(under_budget), TARGET])


def test_a_non_utf8_file_is_one_line(
    tmp_path: Path, sentinel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bytes that are not UTF-8 text: exit 2, one line naming the byte."""
    del sentinel
    status, err = replay(write(tmp_path, b'{"chaoslight_failure": 2, "\xff\xfe"}'), capsys)
    assert status == 2 and "not UTF-8 text (byte" in err


def test_chaoslight_schedule_variable_imports_nothing(
    sentinel: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CHAOSLIGHT_SCHEDULE naming a module's exception is refused where the process arms
    it; the module is not imported and nothing stays armed."""
    schedule = json.dumps(raise_schedule(f"{SENTINEL}:Boom"))
    monkeypatch.setenv(_autostart.SCHEDULE_VARIABLE, schedule)
    with pytest.raises(InvalidSchedule, match="a schedule imports no module"):
        _autostart.start()
    assert not sentinel.exists() and SENTINEL not in sys.modules
    assert chaoslight._runtime._inject.active() is None


def test_chaoslight_run_refuses_it_before_the_job(
    tmp_path: Path, sentinel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`chaoslight run --schedule FILE` refuses it in one line before starting the command."""
    path = write(tmp_path, f"raise@torch.save exception={SENTINEL}:Boom\n", "s.txt")
    started = tmp_path / "started"
    status = main(["run", "--schedule", str(path), "--", "touch", str(started)])
    err = capsys.readouterr().err
    assert status == 2 and "a schedule imports no module" in err and "Traceback" not in err
    assert not started.exists() and not sentinel.exists()


def test_a_database_entry_imports_nothing(sentinel: Path) -> None:
    """A schedule stored in the shared database naming a module's exception, or 1 TiB of
    memory, is skipped by the campaign reading it: never imported, never run."""
    database = InMemoryExampleDatabase()
    hostile = Schedule.parse("allocate@torch.save nbytes=1TiB")
    database.save(KNOWN_FAILURES, json.dumps(raise_schedule(f"{SENTINEL}:Boom")).encode())
    database.save(KNOWN_FAILURES, hostile.to_json().encode())
    database.save(KNOWN_FAILURES, b"[" * 100_000)
    good = Schedule.parse("raise@torch.save exception=OSError")
    database.save(KNOWN_FAILURES, good.to_json().encode())
    assert known_failures(database) == [good]
    assert not sentinel.exists() and SENTINEL not in sys.modules


def test_an_imported_modules_lazy_names_are_not_loaded(
    tmp_path: Path, sentinel: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module already imported whose __getattr__ would run code: a schedule naming one
    of its lazy names reads the module's namespace only, so the code never runs."""
    lazy = tmp_path / "path" / "chaoslight_hostile_lazy.py"
    lazy.write_text(f"def __getattr__(name):\n    open({str(sentinel)!r}, 'w').close()\n")
    monkeypatch.delitem(sys.modules, "chaoslight_hostile_lazy", raising=False)
    __import__("chaoslight_hostile_lazy")
    injection = chaoslight.inject(
        chaoslight.Raise("chaoslight_hostile_lazy:Boom", site="torch.save")
    )
    with pytest.raises(InvalidSchedule, match="chaoslight_hostile_lazy has no Boom"), injection:
        pass
    assert not sentinel.exists()


SITE_PACKAGES = ".venv/lib/python3.11/site-packages"


@pytest.mark.parametrize(
    "target",
    [
        "os:system",
        "subprocess:getoutput",
        f"{SENTINEL}:Boom",
        "../outside.py:train",
        # A folder named like a stdlib or installed module is not that module's code.
        "venv:main",
        "http.server:test",
        "json.tool:main",
        "pytest:main",
        # A module of this project: a missing one, an attribute path out of it.
        "mypkg.missing:main",
        "mypkg:os.abort",
        "train.py:os.abort",
        # A file under this directory that belongs to a virtual environment.
        f"{SITE_PACKAGES}/vendored.py:main",
    ],
)
def test_replay_runs_no_target_a_file_names_outside_this_directory(
    target: str,
    tmp_path: Path,
    sentinel: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A failure file whose target is not this project's code under the current directory
    is refused in one line naming the command that would run it; nothing is imported and
    no World starts."""
    project = tmp_path / "project"
    for folder in ("venv", "http", "json", "pytest", "mypkg", SITE_PACKAGES):
        (project / folder).mkdir(parents=True)
    for package in ("json", "pytest", "mypkg"):  # a stdlib name, an installed one, ours
        (project / package / "__init__.py").write_text("import os\n\ndef main():\n    pass\n")
    (project / "json" / "tool.py").write_text("def main():\n    pass\n")
    (project / "train.py").write_text("import os\n")
    (project / SITE_PACKAGES / "vendored.py").write_text("def main():\n    pass\n")
    (project / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (tmp_path / "outside.py").write_text("def train():\n    pass\n")
    monkeypatch.chdir(project)
    path = write(project, failure_doc(target=target))
    before = set(sys.modules)
    status = main(["replay", str(path)])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert f"chaoslight replay {path} {target}" in err
    assert NoWorld.started == [] and not sentinel.exists()
    assert imported_since(before) == set()


def test_replay_runs_the_target_a_file_names_under_this_directory(
    tmp_path: Path, sentinel: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file's own target runs when it is a .py file or a module of this project."""
    (tmp_path / "train.py").write_text("def main():\n    pass\n")
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "train.py").write_text("def main():\n    pass\n")
    monkeypatch.chdir(tmp_path)
    for target in ("train.py:main", "mypkg.train:main"):
        path = write(tmp_path, failure_doc(target=target))
        with pytest.raises(WorldWouldStart):
            main(["replay", str(path)])
    assert len(NoWorld.started) == 2


# -- schedule text imports nothing; an exception it cannot build is a usage error -----------

NUMERIC_UTILS = "torch._inductor.fx_passes.numeric_utils"  # importing it sets an env var


def test_a_library_submodule_a_schedule_names_is_not_imported(
    tmp_path: Path,
    sentinel: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """exception=torch.<submodule not imported>:X is refused in one line: the submodule is
    not imported (its import would set CUBLAS_WORKSPACE_CONFIG for the program)."""
    del sentinel
    monkeypatch.delitem(sys.modules, NUMERIC_UTILS, raising=False)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    path = write(tmp_path, failure_doc(schedule=raise_schedule(f"{NUMERIC_UTILS}:NoSuch")))
    status, err = replay(path, capsys)
    assert status == 2 and f"{NUMERIC_UTILS} is not imported in this process" in err, err
    assert NUMERIC_UTILS not in sys.modules and "CUBLAS_WORKSPACE_CONFIG" not in os.environ
    assert NoWorld.started == []


@pytest.mark.parametrize("exception", ["UnicodeDecodeError", "UnicodeTranslateError"])
def test_an_exception_its_arguments_cannot_build_is_a_usage_error(
    exception: str, tmp_path: Path, sentinel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """raise@torch.save exception=UnicodeDecodeError (its constructor takes 5 arguments) is
    exit 2 naming the class and the arguments, before any World; inject() refuses it on
    entry, never as an internal error when the fault fires."""
    del sentinel
    text = f"raise@torch.save exception={exception}\n"
    status, err = replay(write(tmp_path, text, "s.txt"), capsys)
    assert status == 2 and f"exception={exception!r} cannot be raised with args=" in err, err
    assert NoWorld.started == []
    with pytest.raises(InvalidSchedule, match="give the arguments its constructor takes"):
        chaoslight.inject(text).__enter__()


# -- the damage ledger: the job's own, read as data -------------------------------------------

ATTACKER_KEY = b"ssh-ed25519 ATTACKER-KEY attacker\n"


def ledger_entry(path: Path, backup: str | None) -> str:
    data = path.read_bytes()
    entry = {"path": str(path), "size": len(data), "sha256": sha256(data).hexdigest()}
    return json.dumps({**entry, "at": 1, "backup": backup}) + "\n"


def plant_ledger(folder: Path, victim: Path, secret: Path, drop: Path) -> None:
    """The review's manifest: overwrite ``victim`` (known content) with the attacker's key,
    copy ``secret`` into ``drop`` (a file the attacker reads), by absolute path and ``..``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "backup-1-evil").write_bytes(ATTACKER_KEY)
    lines = [
        ledger_entry(victim, "backup-1-evil"),
        ledger_entry(drop, str(secret)),
        ledger_entry(drop, f"../{secret.parent.name}/{secret.name}"),
    ]
    (folder / "manifest-1.jsonl").write_text("".join(lines))


@pytest.fixture
def victims(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A user's authorized_keys and private key, and a file an attacker can read."""
    home = tmp_path / "home"
    home.mkdir()
    victim, secret, drop = home / "authorized_keys", home / "id_ed25519", tmp_path / "drop"
    victim.write_bytes(b"ssh-ed25519 USER-KEY user\n")
    secret.write_bytes(b"-----BEGIN PRIVATE KEY----- (user secret)\n")
    drop.write_bytes(b"")
    return victim, secret, drop


def test_chaoslight_run_never_restores_from_a_ledger_planted_in_its_events_dir(
    tmp_path: Path, victims: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """`chaoslight run --events-dir DIR` where DIR already holds a ledger someone planted:
    the job's ledger is its own, so no file the planted manifest names is touched."""
    victim, secret, drop = victims
    events = tmp_path / "events"
    plant_ledger(events / "chaoslight-damage", victim, secret, drop)
    schedule = write(tmp_path, "delay@torch.save seconds=0\n", "s.txt")
    args = ["run", "--schedule", str(schedule), "--events-dir", str(events), "--"]
    assert main([*args, sys.executable, "-c", "pass"]) == 0, capsys.readouterr().err
    assert victim.read_bytes() == b"ssh-ed25519 USER-KEY user\n"
    assert drop.read_bytes() == b""


def test_a_ledger_holding_backups_outside_it_puts_nothing_back(
    tmp_path: Path, victims: tuple[Path, Path, Path]
) -> None:
    """Even in a private ledger, a backup named by an absolute path or with ``..`` is not a
    backup of the ledger's: nothing is copied from it."""
    victim, secret, drop = victims
    ledger = _damage.make_ledger()
    try:
        plant_ledger(ledger, victim, secret, drop)
        (ledger / "backup-1-evil").unlink()
        (ledger / "backup-1-evil").symlink_to(secret)  # a link to the secret: not followed
        with pytest.warns(RuntimeWarning, match="could not put back"):
            _damage.restore(ledger)
    finally:
        shutil.rmtree(ledger)
    assert victim.read_bytes() == b"ssh-ed25519 USER-KEY user\n" and drop.read_bytes() == b""


STATE = {"w": list(range(100))}


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "project" / "model.pt"
    path.parent.mkdir()
    torch.save({"w": torch.arange(1000)}, path)
    return path


def truncated_save(path: Path) -> None:
    with pytest.raises(OSError):
        torch.save(STATE, path)


@pytest.mark.parametrize("named", ["leftover", "open to all", "a link", "gone"])
def test_a_ledger_not_made_for_this_job_is_not_trusted(
    named: str, model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``chaoslight-damage`` folder left beside the events file, or a ledger variable naming
    a folder anyone may write, a link or no folder: inject() keeps its own ledger, puts the
    user's model.pt back itself, and writes nothing there."""
    folder = tmp_path / "chaoslight-damage"
    folder.mkdir()
    if named == "open to all":
        folder.chmod(0o777)
    elif named == "a link":
        private = tmp_path / "private"
        private.mkdir(mode=0o700)
        folder.rmdir()
        folder.symlink_to(private)
    elif named == "gone":
        folder.rmdir()
    if named != "leftover":
        monkeypatch.setenv(_damage.LEDGER_VARIABLE, str(folder))
    before = model.read_bytes()
    with chaoslight.inject("raise@torch.save exception=OSError", events_file=tmp_path / "e.jsonl"):
        truncated_save(model)
        assert model.read_bytes() != before
    assert model.read_bytes() == before
    assert not folder.exists() or list(folder.iterdir()) == []


def test_a_damaged_file_swapped_for_a_link_is_not_written_through(
    model: Path, tmp_path: Path
) -> None:
    """The program replaces its damaged model.pt by a link to another file holding the same
    bytes: putting the original back does not write through the link."""
    other = tmp_path / "other.pt"
    with chaoslight.inject("raise@torch.save exception=OSError"):
        truncated_save(model)
        damaged = model.read_bytes()
        other.write_bytes(damaged)
        model.unlink()
        model.symlink_to(other)
    assert model.is_symlink() and other.read_bytes() == damaged


def test_an_events_dir_of_another_user_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`chaoslight run --events-dir DIR` with DIR owned by someone else: exit 2, one line."""
    schedule = write(tmp_path, "delay@torch.save seconds=0\n", "s.txt")
    started = tmp_path / "started"
    me = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: me + 1)  # as if the folder were another's
    args = ["run", "--schedule", str(schedule), "--events-dir", str(tmp_path), "--"]
    status = main([*args, "touch", str(started)])
    err = capsys.readouterr().err
    assert status == 2 and "belongs to another user" in err and err.count("\n") == 1
    assert not started.exists()
