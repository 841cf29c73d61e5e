"""The JSON and one-line text forms of schedules: exact spellings and lossless round-trips."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from helpers import schedules
from hypothesis import given, settings

import chaoslight
from chaoslight import (
    OOM,
    Allocate,
    Corrupt,
    Crash,
    Delay,
    DropSync,
    MemoryBudget,
    Raise,
    ReorderReduction,
    Schedule,
)

ONE_OF_EACH = Schedule(
    [
        Delay(0.5, site="dist.all_reduce", rank=0, nth=2),
        OOM(site="lightning.training_step", rank=1, step=3),
        OOM(site="lightning.forward", deferred=True, nbytes=3 * 2**20),
        Allocate(site="lightning.training_step", step=1, nbytes=2**30, hold_steps=None),
        DropSync(site="dist.barrier", times=None),
        ReorderReduction(site="dist.all_reduce", order="2,0,1", times=3),
        Raise(OSError(28, "No space left on device"), site="torch.save"),
        Corrupt(site="lightning.next_batch", value="-inf", step=0),
        Crash(site="lightning.backward", rank=3, step=7, signal=15),
        chaoslight.Preempt(site="lightning.training_step", rank=1, step=2, after=0.3),
        chaoslight.Freeze(site="lightning.training_step", rank=1, step=2, seconds=None),
        chaoslight.PgAbort(site="dist.all_reduce", rank=0, step=1),
        chaoslight.Flip(site="lightning.optimizer_step", rank=1, step=3, target="grad"),
        chaoslight.RepeatBatch(site="lightning.next_batch", rank=0, step=2),
        chaoslight.DropBatch(site="lightning.next_batch", rank=1, step=4),
        chaoslight.BadCheckpoint(site="torch.load", effect="missing", run=2),
    ],
    restarts=1,
    memory_budget=MemoryBudget(limit_bytes=2**31, min_tracked_bytes=4096),
)


def test_fault_text_spelling() -> None:
    """A fault's text form is KIND@SITE then only the fields that differ from their defaults."""
    assert str(OOM(site="lightning.training_step", rank=1, step=3)) == (
        "oom@lightning.training_step rank=1 step=3"
    )
    assert str(Delay(0.5, site="dist.all_reduce", rank=0, nth=2)) == (
        "delay@dist.all_reduce rank=0 nth=2 seconds=0.5"
    )
    assert str(Raise(OSError(28, "No space left on device"), site="torch.save")) == (
        'raise@torch.save exception=OSError args=[28,"No space left on device"]'
    )
    assert str(DropSync(site="dist.barrier", times=None)) == "drop_sync@dist.barrier times=*"


def test_text_form_reads_sizes_wildcards_comments_and_blank_lines() -> None:
    """The text reader accepts KiB/MiB/GiB sizes, ``*`` for None, comments and blank lines."""
    text = """
        # a straggler, then an OOM on every rank
        budget limit_bytes=2GiB

        delay@dist.all_reduce rank=0 nth=2 seconds=0.5
        oom@lightning.training_step rank=* step=3 nbytes=1.5MiB
        allocate@lightning.training_step nbytes=4KiB hold_steps=* times=*
        raise@torch.save exception=OSError args=[28,"No space left on device"]
    """
    schedule = Schedule.parse(textwrap.dedent(text))
    assert schedule == Schedule(
        [
            Delay(0.5, site="dist.all_reduce", rank=0, nth=2),
            OOM(site="lightning.training_step", step=3, nbytes=3 * 2**19),
            Allocate(site="lightning.training_step", nbytes=4096, hold_steps=None, times=None),
            Raise(OSError(28, "No space left on device"), site="torch.save"),
        ],
        memory_budget=MemoryBudget(2**31),
    )


def test_json_document_shape() -> None:
    """The JSON form is a versioned object whose faults list every trigger field and param."""
    doc = json.loads(Schedule([OOM(site="lightning.training_step", rank=1, step=3)]).to_json())
    assert doc == {
        "chaoslight_schedule": 1,
        "faults": [
            {
                "kind": "oom",
                "site": "lightning.training_step",
                "rank": 1,
                "step": 3,
                "nth": None,
                "times": 1,
                "nbytes": 2**30,
                "deferred": False,
            }
        ],
    }


def test_one_of_each_kind_round_trips() -> None:
    """Every fault kind, with non-default fields, survives JSON, text and a file unchanged."""
    assert {f.kind for f in ONE_OF_EACH} == set(chaoslight.faults())
    assert Schedule.from_json(ONE_OF_EACH.to_json()) == ONE_OF_EACH
    assert Schedule.from_text(ONE_OF_EACH.to_text()) == ONE_OF_EACH
    assert Schedule.parse(str(ONE_OF_EACH)) == ONE_OF_EACH
    assert Schedule.parse(ONE_OF_EACH.to_json(indent=None)) == ONE_OF_EACH


def test_save_and_load_round_trip(tmp_path) -> None:
    """``save`` writes JSON that ``load`` reads back; ``load`` also reads the text form."""
    path = tmp_path / "schedule.json"
    ONE_OF_EACH.save(path)
    assert json.loads(path.read_text())["chaoslight_schedule"] == 1
    assert Schedule.load(path) == ONE_OF_EACH
    text_path = tmp_path / "schedule.txt"
    text_path.write_text(str(ONE_OF_EACH))
    assert Schedule.load(str(text_path)) == ONE_OF_EACH


def test_empty_schedule_forms() -> None:
    """``Schedule()`` is valid: empty text, a JSON document with no faults, both read back."""
    empty = Schedule()
    assert len(empty) == 0
    assert not empty
    assert str(empty) == ""
    assert Schedule.parse("") == empty
    assert Schedule.parse("# nothing\n\n") == empty
    assert Schedule.from_json(empty.to_json()) == empty
    assert Schedule.from_dict({"chaoslight_schedule": 1}) == empty


@settings(max_examples=300)
@given(schedules())
def test_random_schedules_round_trip(schedule: Schedule) -> None:
    """Any valid schedule reads back equal from its JSON form and from its text form."""
    assert Schedule.from_json(schedule.to_json()) == schedule
    assert Schedule.from_json(schedule.to_json(indent=None)) == schedule
    assert Schedule.from_text(schedule.to_text()) == schedule
    assert Schedule.parse(str(schedule)) == schedule
    for fault in schedule:
        assert Schedule.parse(str(fault)).faults == (fault,)


@pytest.mark.slow
def test_schedules_are_built_and_read_without_importing_torch() -> None:
    """Building, printing, validating and parsing schedules imports neither torch nor Lightning."""
    code = textwrap.dedent(
        """
        import sys
        import chaoslight
        from chaoslight import OOM, Delay, MemoryBudget, Raise, Schedule
        s = Schedule([OOM(site="lightning.training_step", rank=1, step=3, deferred=True),
                      Delay(0.5, site="dist.all_reduce", nth=2),
                      Raise(OSError(28, "No space left on device"), site="torch.save")],
                     memory_budget=MemoryBudget(2**30))
        assert Schedule.parse(str(s)) == s and Schedule.parse(s.to_json()) == s
        chaoslight.sites(); chaoslight.faults()
        try:
            Schedule.parse("oom@lightning.trainig_step")
        except chaoslight.InvalidSchedule:
            pass
        loaded = sorted(m for m in sys.modules
                        if m.split(".")[0] in ("torch", "lightning", "pytorch_lightning"))
        print(loaded)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
