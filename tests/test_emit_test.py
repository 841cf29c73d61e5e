"""`emit_test` writes a regression test that is valid Python whatever the failure's texts hold,
and that replays exactly the failure it was written from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import chaoslight
from chaoslight import Failure, Raise, Schedule
from chaoslight._search._failure import emit_test

NASTY = ['"""', "'''", "\\", "\\n", "\n", "\r", "\r\n", "\x00", "\ud800", "\u2028", "{}", "#"]
texts = st.text() | st.lists(st.sampled_from(NASTY) | st.text(max_size=3)).map("".join)


def failure_with(target: str, reason: str, arg: str, check: str) -> Failure:
    schedule = Schedule([Raise("OSError", args=(28, arg), site="torch.save", rank=1)])
    spec = {"name": check, "params": {"note": arg, "atol": float("inf")}}
    return Failure(schedule, target, 3, 12.5, (spec,), reason)


def load(path: Path) -> dict[str, Any]:
    """Compile and execute an emitted file's module level; return its names."""
    code = compile(path.read_text(encoding="utf-8"), str(path), "exec")
    namespace: dict[str, Any] = {"__name__": "emitted"}
    exec(code, namespace)
    return namespace


@settings(max_examples=150)
@given(target=texts, reason=texts, arg=texts, check=texts)
def test_emitted_file_is_valid_python_for_any_text(
    tmp_path_factory: pytest.TempPathFactory, target: str, reason: str, arg: str, check: str
) -> None:
    """Quotes, backslashes, triple quotes, newlines, NUL or surrogates in any text still
    give a file that compiles and holds that exact schedule, target and checks."""
    failure = failure_with(target, reason, arg, check)
    path = tmp_path_factory.mktemp("emit") / "test_regression.py"
    emit_test(failure, path)
    names = load(path)
    assert names["SCHEDULE"] == failure.schedule
    assert names["TARGET"] == target
    assert names["CHECKS"][0]["name"] == check and names["CHECKS"][0]["params"]["note"] == arg
    tests = [name for name in names if name.startswith("test_")]
    assert len(tests) == 1 and tests[0].isidentifier()
    assert names[tests[0]].__doc__.startswith(target)


def test_emitted_test_replays_the_failure_it_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The emitted test hands chaoslight.replay a Failure equal in schedule, target, world
    size, timeout and checks, and fails with the verdict's reason when it still fails."""
    failure = failure_with("tests/train.py:main", 'it "hung"\non rank 1', "disk full", "no-hang")
    path = tmp_path / "test_regression.py"
    emit_test(failure, path)
    replayed: list[Failure] = []

    class Verdict:
        failed = True
        reason = "rank 1 waits in dist.all_reduce"

    class Outcome:
        def report(self) -> str:
            return "report"

    def fake_replay(given: Failure) -> tuple[Verdict, Outcome]:
        replayed.append(given)
        return Verdict(), Outcome()

    monkeypatch.setattr(chaoslight, "replay", fake_replay)
    names = load(path)
    with pytest.raises(AssertionError, match="rank 1 waits in dist"):
        names["test_train_main_under_minimal_schedule"]()
    (got,) = replayed
    assert (got.schedule, got.target, got.world_size, got.timeout, got.checks) == (
        failure.schedule,
        failure.target,
        failure.world_size,
        failure.timeout,
        failure.checks,
    )


def test_emitted_file_quotes_the_reason_as_comments(tmp_path: Path) -> None:
    """The failure's reason is readable in the file, one comment line per line of it."""
    failure = failure_with("t.py:f", 'first line\nsecond """ line', "x", "no-hang")
    path = tmp_path / "test_regression.py"
    emit_test(failure, path)
    text = path.read_text(encoding="utf-8")
    assert '#   first line\n#   second """ line\n' in text
