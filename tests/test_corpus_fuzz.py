"""``chaoslight fuzz`` with default arguments on the corpus: no false alarm on any correct
program, every buggy twin found with the right cause (benchmarks/false_alarms.py runs the
same with 50+ examples each)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import chaoslight
from chaoslight import World
from chaoslight._search._campaign import BASELINE, CLEAN, FOUND

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # examples.corpus, and its own check for the workers
from examples.corpus import CORPUS, Entry  # noqa: E402

pytestmark = pytest.mark.slow

CI_EXAMPLES = 4  # per correct program here, probes aside; the benchmark runs 50 or more
CI_SECONDS = 4.0  # and at most this long per correct program (the suite's budget)
SEARCHABLE = [entry for entry in CORPUS if entry.world_size == 2]


@pytest.fixture
def world(world2: World) -> World:
    """The session's 2-rank World, for the whole corpus."""
    return world2


def fuzz(
    entry: Entry, function: str, world: World, examples: int, seconds: float, timeout: float
) -> chaoslight._search.Result:
    result, _ = chaoslight.fuzz(
        entry.target(function),
        world_size=entry.world_size,
        checks=entry.build_checks(),
        max_examples=examples,
        max_time=seconds,
        seed=0,
        timeout=timeout,
        replays=0,  # the baseline runs twice; tests/test_fuzz.py pins replays down
        world=world,
    )
    return result


@pytest.mark.parametrize("entry", SEARCHABLE, ids=lambda e: e.name)
def test_no_false_alarm_on_a_correct_program(entry: Entry, world: World) -> None:
    """The default search (every production fault kind, the oracle) passes a correct program."""
    result = fuzz(entry, "train", world, CI_EXAMPLES, CI_SECONDS, timeout=20.0)
    assert result.status == CLEAN, (result.schedule, result.verdict)


@pytest.mark.parametrize("entry", SEARCHABLE, ids=lambda e: e.name)
def test_every_buggy_twin_is_found(entry: Entry, world: World) -> None:
    """The default search finds each buggy twin: with no fault when it needs none."""
    result = fuzz(entry, "train_buggy", world, 60, 90.0, timeout=5.0)  # hangs cost little
    assert result.status in (FOUND, BASELINE), (result.status, result.verdict)
    assert result.verdict is not None and not result.verdict.internal
    if not entry.schedule:
        assert result.status == BASELINE and len(result.schedule) == 0, result.schedule
