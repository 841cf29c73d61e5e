"""Failure files keep everything a replay needs to judge as the search judged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import ddp_target

import chaoslight
from chaoslight import Failure, Schedule, World
from chaoslight._search._failure import check_specs, emit_test
from chaoslight.checks import Check, NoHang, ReplicasInSync


class CountsBatches(Check):
    """A user check that lives outside chaoslight, with a parameter."""

    name = "counts-batches"

    def __init__(self, at_least: int = 1) -> None:
        self.at_least = at_least

    def judge(self, evidence: Any) -> list[Any]:
        return []


def test_check_parameters_round_trip_through_the_file(tmp_path: Path) -> None:
    """ReplicasInSync(atol=0.5) and NoHang(7) come back with their parameters."""
    failure = Failure(
        Schedule.parse("oom@lightning.forward rank=1 step=2"),
        "train.py:main",
        checks=check_specs([ReplicasInSync(atol=0.5), NoHang(7)]),
        reason="x",
    )
    failure.save(tmp_path / "f.json")
    loaded = Failure.load(tmp_path / "f.json")
    assert loaded == failure
    replicas, no_hang = loaded.build_checks()
    assert isinstance(replicas, ReplicasInSync) and replicas.atol == 0.5
    assert isinstance(no_hang, NoHang) and no_hang.timeout == 7.0


def test_a_user_check_is_stored_by_import_path_and_rebuilt_only_from_the_class_given(
    tmp_path: Path,
) -> None:
    """A check chaoslight does not know by name is stored as module:Class with its params;
    loading never imports it: it is rebuilt, with the file's params, from the class given."""
    (spec,) = check_specs([CountsBatches(at_least=3)])
    assert spec["import"] == f"{__name__}:CountsBatches" and spec["params"] == {"at_least": 3}
    failure = Failure(Schedule(), "t.py:f", checks=(spec,))
    failure.save(tmp_path / "f.json")
    loaded = Failure.load(tmp_path / "f.json")
    checks, skipped = loaded.resolve_checks()
    assert checks == [] and len(skipped) == 1
    assert f"--check {__name__}:CountsBatches" in skipped[0] and "\n" not in skipped[0]
    (rebuilt,) = loaded.build_checks(user_checks=[CountsBatches])
    assert isinstance(rebuilt, CountsBatches) and rebuilt.at_least == 3
    mine = CountsBatches(at_least=9)
    assert loaded.build_checks(user_checks=[mine]) == [mine]


def test_a_version_1_file_with_check_names_still_loads(tmp_path: Path) -> None:
    """Files written before check specs (names only) load with default parameters."""
    doc = {
        "chaoslight_failure": 1,
        "target": "t.py:f",
        "world_size": 2,
        "timeout": 10.0,
        "checks": ["replicas-in-sync"],
        "mode": "survive",  # the search's removed mode: a key a loader now ignores
        "reason": "r",
        "schedule": Schedule.parse("delay@dist.barrier seconds=0.1").to_dict(),
    }
    (tmp_path / "old.json").write_text(json.dumps(doc))
    (check,) = Failure.load(tmp_path / "old.json").build_checks()
    assert isinstance(check, ReplicasInSync) and check.atol == 0.0


def test_a_bare_schedule_file_replays_with_the_default_checks(tmp_path: Path) -> None:
    """A plain schedule file is a failure with the default search's checks."""
    (tmp_path / "s.txt").write_text("oom@lightning.forward rank=0 step=0\n")
    names = Failure.load(tmp_path / "s.txt").check_names
    assert names == chaoslight._search.DEFAULT_CHECKS


@pytest.mark.slow
def test_replay_judges_with_the_stored_parameters(world2: World, tmp_path: Path) -> None:
    """The same drifting program fails replay with atol=0 and passes it with a huge atol:
    the stored parameter is what the replay judged with."""
    target = ddp_target("rank_zero_edit")
    strict = Failure(Schedule(), target, checks=check_specs([ReplicasInSync()]))
    loose = Failure(Schedule(), target, checks=check_specs([ReplicasInSync(atol=1e9)]))
    assert chaoslight.replay(strict, timeout=20, world=world2)[0].failed
    assert not chaoslight.replay(loose, timeout=20, world=world2)[0].failed


def test_an_emitted_test_imports_a_user_check_by_name_and_passes_the_class(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The emitted test imports the user's check class in its own source and hands it to
    replay as an object; an import path that is no Python name becomes a comment only."""
    specs = (
        *check_specs([NoHang(), CountsBatches(at_least=3)]),
        {"name": "odd", "import": "os; import shutil:X", "params": {}},
    )
    failure = Failure(Schedule(), "t.py:f", checks=specs, reason="r")
    path = tmp_path / "test_regression.py"
    emit_test(failure, path)
    source = path.read_text(encoding="utf-8")
    assert f"from {__name__} import CountsBatches\n" in source and "import shutil\n" not in source
    given: list[Any] = []

    def fake_replay(failure: Failure, user_checks: Any = ()) -> Any:
        given.extend(failure.resolve_checks(user_checks)[0])
        raise AssertionError("replayed")

    monkeypatch.setattr(chaoslight, "replay", fake_replay)
    namespace: dict[str, Any] = {"__name__": "emitted"}
    exec(compile(source, str(path), "exec"), namespace)
    with pytest.raises(AssertionError, match="replayed"):
        namespace["test_t_f_under_minimal_schedule"]()
    no_hang, counts = given
    assert isinstance(no_hang, NoHang) and isinstance(counts, CountsBatches)
    assert counts.at_least == 3
