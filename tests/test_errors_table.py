"""Bad input, table-driven: every mistake is refused with ONE line naming the field and value."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import chaoslight
from chaoslight import (
    OOM,
    Allocate,
    Corrupt,
    Crash,
    Delay,
    DropSync,
    InvalidArgument,
    InvalidSchedule,
    MemoryBudget,
    Raise,
    ReorderReduction,
    Schedule,
)
from chaoslight._cli import main
from chaoslight.checks import Deterministic, NoHang, ReplicasInSync, ResumeEquivalence

STEP = "lightning.training_step"
HEADER = '{"chaoslight_schedule": 1, "faults": [%s]}'


def case(id_: str, build: Callable[[], Any], *expected: str, error: type = InvalidArgument) -> Any:
    return pytest.param(build, error, expected, id=id_)


OBJECT_CASES = [
    case("site-not-a-str", lambda: Delay(site=3), "site=3", "not a known site"),
    case(
        "site-typo",
        lambda: Delay(site="lightning.trainig_step"),
        "site='lightning.trainig_step'",
        "did you mean 'lightning.training_step'",
    ),
    case("rank-negative", lambda: Delay(site=STEP, rank=-1), "rank=-1", "ranks count from 0"),
    case("rank-str", lambda: Delay(site=STEP, rank="1"), "rank='1'", "int"),
    case("rank-bool", lambda: Delay(site=STEP, rank=True), "rank=True", "int"),
    case("step-negative", lambda: OOM(site=STEP, step=-2), "step=-2", "steps count from 0"),
    case("step-float", lambda: OOM(site=STEP, step=1.5), "step=1.5", "int"),
    case("nth-zero", lambda: OOM(site=STEP, nth=0), "nth=0", "at least 1"),
    case("times-zero", lambda: OOM(site=STEP, times=0), "times=0", "at least 1"),
    case("delay-nan", lambda: Delay(math.nan, site=STEP), "seconds=nan", "finite"),
    case("delay-negative", lambda: Delay(-1, site=STEP), "seconds=-1", "between 0 and 3600"),
    case("delay-str", lambda: Delay("abc", site=STEP), "seconds='abc'", "number"),
    case("delay-too-long", lambda: Delay(1e9, site=STEP), "seconds=1000000000.0", "3600"),
    case("corrupt-value", lambda: Corrupt(site=STEP, value="zero"), "value='zero'", "nan, inf"),
    case(
        "corrupt-no-result",
        lambda: Corrupt(site="lightning.backward"),
        "corrupt",
        "site='lightning.backward'",
        "result site",
    ),
    case(
        "reorder-order",
        lambda: ReorderReduction(site="dist.all_reduce", order="sideways"),
        "order='sideways'",
        "permutation",
    ),
    case(
        "reorder-not-a-permutation",
        lambda: ReorderReduction(site="dist.all_reduce", order="0,0"),
        "order='0,0'",
    ),
    case(
        "reorder-not-a-reduction",
        lambda: ReorderReduction(site="dist.barrier"),
        "reorder",
        "site='dist.barrier'",
        "reduction site",
    ),
    case("raise-int", lambda: Raise(42, site=STEP), "exception=42", "exception class"),
    case("raise-non-exception-class", lambda: Raise(int, site=STEP), "exception=<class 'int'>"),
    case(
        "raise-unknown-name",
        lambda: Raise("NotAnError", site=STEP),
        "exception='NotAnError'",
        "module:QualName",
    ),
    case("raise-args", lambda: Raise(site=STEP, args=([1],)), "args=([1],)", "str, int"),
    case(
        "drop-sync-not-a-sync-site",
        lambda: DropSync(site=STEP),
        "drop_sync",
        f"site={STEP!r}",
        "sync site",
    ),
    case("oom-nbytes", lambda: OOM(site=STEP, nbytes=0), "nbytes=0", "at least 1"),
    case("oom-deferred", lambda: OOM(site=STEP, deferred="yes"), "deferred='yes'"),
    case("allocate-hold", lambda: Allocate(site=STEP, hold_steps=0), "hold_steps=0"),
    case("crash-signal", lambda: Crash(site=STEP, signal=0), "signal=0"),
    case("budget-limit", lambda: MemoryBudget(0), "limit_bytes=0", "at least 1"),
    case("budget-min-tracked", lambda: MemoryBudget(10, "1"), "min_tracked_bytes='1'"),
    case("schedule-item", lambda: Schedule([42]), "faults[0]=42", "not a fault"),
    case("schedule-budget", lambda: Schedule(memory_budget=5), "memory_budget=5"),
    case("inject-schedule", lambda: chaoslight.inject(42), "schedule=42"),
    case("parse-not-text", lambda: Schedule.parse(None), "text=None", "str"),
    case("parse-bytes", lambda: Schedule.parse(b"oom@torch.save"), "text=b'oom@torch.save'"),
    case("from-text-not-text", lambda: Schedule.from_text(3), "text=3"),
    case("from-json-not-text", lambda: Schedule.from_json(123), "text=123", "JSON form"),
    case(
        "schedule-of-text",
        lambda: Schedule("oom@lightning.forward"),
        "faults='oom@lightning.forward'",
        "text form: use Schedule.parse(...)",
    ),
    case("schedule-of-dict", lambda: Schedule({"faults": []}), "Schedule.from_dict"),
    case("schedule-not-iterable", lambda: Schedule(42), "faults=42", "list of faults"),
    case("step-huge", lambda: OOM(site=STEP, step=10**23), "step=10", "at most 1000000000"),
    case("nth-huge", lambda: OOM(site=STEP, nth=10**12), "nth=", "at most 1000000000"),
    case("times-huge", lambda: OOM(site=STEP, times=10**12), "times=", "at most"),
    case("rank-huge", lambda: OOM(site=STEP, rank=10**12), "rank=", "ranks"),
    case("oom-huge", lambda: OOM(10**30, site=STEP), "nbytes=", "256 TiB"),
    case("allocate-huge", lambda: Allocate(10**15, site=STEP), "nbytes=", "256 TiB"),
    case("allocate-hold-huge", lambda: Allocate(site=STEP, hold_steps=10**10), "hold_steps="),
    case("budget-huge", lambda: MemoryBudget(2**60), "limit_bytes=", "256 TiB"),
    case(
        "raise-args-not-a-tuple",
        lambda: Raise("OSError", args=28, site=STEP),
        "args=28",
        "tuple or list",
    ),
    case("replicas-atol-negative", lambda: ReplicasInSync(atol=-1), "atol=-1", "not negative"),
    case("replicas-atol-str", lambda: ReplicasInSync(atol="x"), "atol='x'", "number"),
    case("replicas-buffers", lambda: ReplicasInSync(buffers="yes"), "buffers='yes'"),
    case("no-hang-inf", lambda: NoHang(math.inf), "timeout=inf", "finite"),
    case("no-hang-zero", lambda: NoHang(0), "timeout=0", "positive"),
    case("deterministic-atol", lambda: Deterministic(atol=math.nan), "atol=nan"),
    case("deterministic-runs", lambda: Deterministic(runs=10**6), "runs=1000000", "at most"),
    case("resume-atol", lambda: ResumeEquivalence(atol=-0.5), "atol=-0.5"),
    case("resume-step", lambda: ResumeEquivalence(crash_at_step=0), "crash_at_step=0"),
    case(
        "world-size-huge",
        lambda: chaoslight.World(size=100_000),
        "size=100000",
        "at most 64",
        "each rank is a process on this machine",
    ),
    case("world-size-zero", lambda: chaoslight.World(size=0), "size=0", "at least 1"),
    case("world-spares", lambda: chaoslight.World(spares=10**6), "spares=1000000", "at most 64"),
    case("world-fork", lambda: chaoslight.World(fork="yes"), "fork='yes'", "True or False"),
    case("crash-signal-unknown", lambda: Crash(site=STEP, signal=999), "signal=999"),
]

JSON_CASES = [
    case(
        "json-malformed",
        lambda: Schedule.from_json('{\n  "chaoslight_schedule": 1,\n  "faults": [\n}'),
        "line 4",
        "malformed",
    ),
    case("json-trailing", lambda: Schedule.from_json('{"chaoslight_schedule": 1} x'), "line 1"),
    case(
        "json-version",
        lambda: Schedule.from_json('{"chaoslight_schedule": 2}'),
        "chaoslight_schedule=2",
        "expected 1",
    ),
    case(
        "json-no-version",
        lambda: Schedule.from_json('{"faults": []}'),
        "chaoslight_schedule=None",
    ),
    case("json-not-object", lambda: Schedule.from_json("[]"), "JSON object", "list"),
    case(
        "json-unknown-key",
        lambda: Schedule.from_json('{"chaoslight_schedule": 1, "extra": 1}'),
        "'extra'",
    ),
    case(
        "json-faults-not-list",
        lambda: Schedule.from_json('{"chaoslight_schedule": 1, "faults": {}}'),
        "faults={}",
    ),
    case("json-fault-not-object", lambda: Schedule.from_json(HEADER % "3"), "faults[0]", "int"),
    case(
        "json-kind-typo",
        lambda: Schedule.from_json(HEADER % '{"kind": "dealy", "site": "torch.save"}'),
        "faults[0]",
        "kind='dealy'",
        "did you mean 'delay'",
    ),
    case(
        "json-kind-missing",
        lambda: Schedule.from_json(HEADER % '{"site": "torch.save"}'),
        "kind=None",
    ),
    case(
        "json-field-typo",
        lambda: Schedule.from_json(HEADER % '{"kind": "delay", "site": "torch.save", "secs": 1}'),
        "'secs'",
        "did you mean 'seconds'",
    ),
    case(
        "json-site-missing",
        lambda: Schedule.from_json(HEADER % '{"kind": "delay"}'),
        "delay needs a site",
    ),
    case(
        "json-second-fault-nth",
        lambda: Schedule.from_json(
            HEADER % '{"kind": "delay", "site": "torch.save"}, '
            '{"kind": "delay", "site": "torch.save", "nth": 0}'
        ),
        "faults[1]",
        "nth=0",
    ),
    case(
        "json-site-typo",
        lambda: Schedule.from_json(HEADER % '{"kind": "oom", "site": "torch.sve"}'),
        "site='torch.sve'",
        "did you mean 'torch.save'",
    ),
    case(
        "json-budget-not-object",
        lambda: Schedule.from_json('{"chaoslight_schedule": 1, "memory_budget": 5}'),
        "memory_budget=5",
    ),
    case(
        "json-budget-negative",
        lambda: Schedule.from_json(
            '{"chaoslight_schedule": 1, "memory_budget": {"limit_bytes": -1}}'
        ),
        "limit_bytes=-1",
    ),
    case(
        "json-budget-field",
        lambda: Schedule.from_json('{"chaoslight_schedule": 1, "memory_budget": {"limit": 1}}'),
        "memory_budget",
        "'limit'",
    ),
]

TEXT_CASES = [
    case(
        "text-not-kind-at-site",
        lambda: Schedule.from_text("delay@lightning.training_step\nboom"),
        "line 2",
        "'boom'",
        "KIND@SITE",
    ),
    case(
        "text-rank",
        lambda: Schedule.parse("oom@lightning.training_step rank=-1"),
        "line 1",
        "rank=-1",
    ),
    case(
        "text-seconds-word",
        lambda: Schedule.parse("delay@lightning.training_step seconds=abc"),
        "line 1",
        "seconds='abc'",
    ),
    case(
        "text-not-key-value",
        lambda: Schedule.parse("delay@lightning.training_step seconds"),
        "line 1",
        "'seconds'",
        "key=value",
    ),
    case(
        "text-site-typo",
        lambda: Schedule.parse("\n\ndelay@lightning.trainig_step"),
        "line 3",
        "site='lightning.trainig_step'",
        "did you mean 'lightning.training_step'",
    ),
    case(
        "text-kind-typo",
        lambda: Schedule.parse("# comment\n\nfrobnicate@lightning.training_step"),
        "line 3",
        "kind='frobnicate'",
    ),
    case("text-twice", lambda: Schedule.parse("delay@torch.save rank=1 rank=2"), "line 1", "rank"),
    case("text-bracket", lambda: Schedule.parse("raise@torch.save args=[28"), "line 1", "bracket"),
    case("text-quote", lambda: Schedule.parse('raise@torch.save args="a'), "line 1", "quote"),
    case(
        "text-size-unit",
        lambda: Schedule.parse("oom@torch.save nbytes=1.5XB"),
        "line 1",
        "nbytes='1.5XB'",
    ),
    case(
        "text-unknown-field",
        lambda: Schedule.parse("oom@torch.save\noom@torch.save sconds=1"),
        "line 2",
        "'sconds'",
    ),
    case("text-empty-site", lambda: Schedule.parse("oom@"), "line 1", "'oom@'"),
    case(
        "text-budget",
        lambda: Schedule.parse("delay@torch.save\nbudget limit_bytes=0"),
        "line 2",
        "limit_bytes=0",
    ),
    case("text-budget-field", lambda: Schedule.parse("budget limit=5"), "line 1", "'limit'"),
    case(
        "text-budget-negative-size",
        lambda: Schedule.parse("budget limit_bytes=-5MiB"),
        "line 1",
        "limit_bytes=-5MiB must not be negative",
    ),
    case(
        "text-budget-unknown-unit",
        lambda: Schedule.parse("budget limit_bytes=12XB"),
        "line 1",
        "unknown unit 'XB'",
        "known units: B, KiB, MiB",
    ),
    case(
        "text-fraction-of-a-byte",
        lambda: Schedule.parse("oom@torch.save nbytes=1.5B"),
        "line 1",
        "nbytes=1.5B",
        "whole number of bytes",
    ),
    case(
        "text-step-huge",
        lambda: Schedule.parse("oom@torch.save step=100000000000000000000000"),
        "line 1",
        "step=100000000000000000000000",
        "at most 1000000000",
    ),
    case(
        "text-drop-sync-site",
        lambda: Schedule.parse("drop_sync@lightning.training_step"),
        "line 1",
        "site='lightning.training_step'",
    ),
]


def _unreadable(tmp_path: Path) -> list[tuple[Path, str]]:
    missing = tmp_path / "missing.json"
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00{")
    return [
        (missing, "No such file or directory"),
        (tmp_path, "Is a directory"),
        (binary, "UTF-8"),
    ]


def check_message(exc: BaseException, expected: tuple[str, ...]) -> None:
    message = str(exc)
    assert "\n" not in message, f"message is not one line: {message!r}"
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"


@pytest.mark.parametrize(("build", "error", "expected"), OBJECT_CASES)
def test_bad_fault_arguments(build: Callable[[], Any], error: type, expected: tuple) -> None:
    """A bad fault, budget, schedule or inject argument raises one line naming field and value."""
    with pytest.raises(error) as caught:
        build()
    check_message(caught.value, expected)


@pytest.mark.parametrize(("build", "error", "expected"), JSON_CASES)
def test_bad_json_schedules(build: Callable[[], Any], error: type, expected: tuple) -> None:
    """A bad JSON schedule raises InvalidSchedule: one line with the fault index or JSON line."""
    with pytest.raises(InvalidSchedule) as caught:
        build()
    check_message(caught.value, expected)


@pytest.mark.parametrize(("build", "error", "expected"), TEXT_CASES)
def test_bad_text_schedules(build: Callable[[], Any], error: type, expected: tuple) -> None:
    """A bad text schedule raises InvalidSchedule: one line starting with the line number."""
    with pytest.raises(InvalidSchedule) as caught:
        build()
    check_message(caught.value, expected)
    assert str(caught.value).startswith("line ")


def test_unreadable_schedule_files(tmp_path: Path) -> None:
    """A missing, directory or non-UTF-8 schedule file raises InvalidSchedule naming the path."""
    for path, reason in _unreadable(tmp_path):
        with pytest.raises(InvalidSchedule) as caught:
            Schedule.load(path)
        check_message(caught.value, (repr(str(path)), reason))


@pytest.mark.parametrize(
    "name", ["no_such_module:DiskFull", "os:NoSuchError", ":DiskFull", ".relative:DiskFull"]
)
def test_unimportable_raise_exception_is_refused_on_entry(name: str) -> None:
    """A Raise naming an exception class that cannot be imported is refused when injected."""
    injection = chaoslight.inject(Raise(name, site="torch.save"))
    with pytest.raises(InvalidSchedule) as caught, injection:
        pass
    check_message(caught.value, (f"exception={name!r}", "cannot be imported"))
    assert chaoslight._runtime._inject.active() is None


def test_raise_of_a_non_exception_object_is_refused_on_entry() -> None:
    """A Raise whose "module:QualName" names something other than an exception is refused."""
    with (
        pytest.raises(InvalidSchedule) as caught,
        chaoslight.inject(Raise("os:sep", site="torch.save")),
    ):
        pass
    check_message(caught.value, ("exception='os:sep'", "not an exception class"))


def test_errors_are_value_errors_and_chaos_errors() -> None:
    """InvalidSchedule is an InvalidArgument, a ValueError and a ChaosError, so either catches."""
    with pytest.raises(ValueError):
        Schedule.parse("oom@nowhere")
    with pytest.raises(chaoslight.ChaosError):
        Delay(site=STEP, rank=-1)
    assert issubclass(InvalidSchedule, InvalidArgument)


def _cli_paths(tmp_path: Path) -> dict[str, str]:
    """Files the CLI cases name: a good schedule, a binary one, a plain file, a folder."""
    good = tmp_path / "good.txt"
    good.write_text("delay@lightning.training_step seconds=0.01\n")
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00{")
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    negative = tmp_path / "negative.txt"
    negative.write_text("budget limit_bytes=-5MiB\n")
    return {
        "GOOD": str(good),
        "BINARY": str(binary),
        "FILE": str(a_file),
        "FOLDER": str(tmp_path),
        "NEGATIVE": str(negative),
    }


CLI_CASES = [
    (["run", "--schedule", "BINARY", "--", "true"], "not UTF-8 text"),
    (["run", "--schedule", "NEGATIVE", "--", "true"], "limit_bytes=-5MiB must not be negative"),
    (["run", "--schedule", "GOOD", "--events-dir", "FILE", "--", "true"], "is a file"),
    (["run", "--schedule", "GOOD", "--events-dir", "FILE/sub", "--", "true"], "a file"),
    (["run", "--schedule", "GOOD", "--timeout", "inf", "--", "true"], "--timeout=inf"),
    (["run", "--schedule", "GOOD", "--timeout", "-1", "--", "true"], "--timeout=-1"),
    (["replay", "BINARY", "t.py:f"], "not UTF-8 text"),
    (["replay", "GOOD", "t.py:f", "--world-size", "0"], "--world-size=0 must be at least 1"),
    (["replay", "GOOD", "t.py:f", "--world-size", "65"], "--world-size=65 must be at most 64"),
    (["replay", "GOOD", "t.py:f", "--timeout", "nan"], "--timeout=nan"),
    (["replay", "FOLDER", "t.py:f"], "Is a directory"),
    (["fuzz", "t.py:f", "--world-size", "100000"], "each rank is a process on this machine"),
    (["fuzz", "t.py:f", "--max-examples", "0"], "--max-examples=0 must be at least 1"),
    (["fuzz", "t.py:f", "--max-examples", "10000000"], "--max-examples=10000000 must be at most"),
    (["fuzz", "t.py:f", "--steps", "10000000"], "--steps=10000000 must be at most 1000000"),
    (["fuzz", "t.py:f", "--max-faults", "1000"], "--max-faults=1000 must be at most 64"),
    (["fuzz", "t.py:f", "--replays", "1000"], "--replays=1000 must be at most 100"),
    (["fuzz", "t.py:f", "--timeout", "0"], "--timeout=0"),
    (["fuzz", "t.py:f", "--database", "FILE"], "--database="),
    (["fuzz", "t.py:f", "--out", "FOLDER"], "is a folder"),
    (["fuzz", "t.py:f", "--emit-test", "FILE/test_x.py"], "a file"),
    (["fuzz", "t.py:f", "--world-size", "two"], "invalid int value: 'two'"),
]


@pytest.mark.parametrize(("argv", "message"), CLI_CASES, ids=lambda v: " ".join(v)[:60])
def test_bad_command_lines_exit_2_with_one_line(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A malformed command line exits 2 before anything starts, with one line naming it."""
    paths = _cli_paths(tmp_path)
    argv = [paths.get(a.split("/")[0], a.split("/")[0]) + a[len(a.split("/")[0]) :] for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("chaoslight: error: ") and message in err[0], err
