"""The corpus (examples/corpus): every correct program passes, every buggy twin does not.

One World per world size for the whole module. A correct program is never expected to
hang, so its runs get the full 30 s progress timeout; a buggy twin that hangs is
recognised after ``BUGGY_TIMEOUT`` seconds without progress (a correct run reaches a
site many times a second), which keeps the module near two minutes on two cores.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # before any World starts: its workers unpickle our check

from examples.corpus import CORPUS, Entry  # noqa: E402

pytestmark = pytest.mark.slow

TIMEOUT = 30.0
BUGGY_TIMEOUT = 10.0

# Two-rank programs first, so each World size starts once per test function at most.
ORDERED = sorted(CORPUS, key=lambda entry: entry.world_size)
WITH_SCHEDULE = [entry for entry in ORDERED if entry.schedule]


@pytest.fixture(scope="module")
def worlds() -> Iterator[Any]:
    """One World per world size, started on first use and kept for the module."""
    from chaoslight import World

    started: dict[int, World] = {}

    def get(size: int) -> World:
        if size not in started:
            started[size] = World(size=size)
        return started[size]

    try:
        yield get
    finally:
        for world in started.values():
            world.close()


def _describe(outcome: Any) -> str:
    return outcome.report()[-3000:]


@pytest.mark.parametrize("entry", ORDERED, ids=lambda entry: entry.name)
def test_correct_program_passes(worlds: Any, entry: Entry) -> None:
    """train() passes with no fault and every check the entry names."""
    world = worlds(entry.world_size)
    outcome = world.run(entry.target("train"), "", timeout=TIMEOUT, checks=entry.build_checks())
    assert outcome.status == "passed", _describe(outcome)


@pytest.mark.parametrize("entry", WITH_SCHEDULE, ids=lambda entry: entry.name)
def test_correct_program_passes_the_revealing_schedule(worlds: Any, entry: Entry) -> None:
    """train() also passes under the schedule that breaks its buggy twin."""
    world = worlds(entry.world_size)
    outcome = world.run(
        entry.target("train"), entry.schedule, timeout=TIMEOUT, checks=entry.build_checks()
    )
    assert outcome.status == "passed", _describe(outcome)


@pytest.mark.parametrize("entry", ORDERED, ids=lambda entry: entry.name)
def test_buggy_twin_does_not_pass(worlds: Any, entry: Entry) -> None:
    """train_buggy() fails, hangs or crashes under its documented schedule."""
    world = worlds(entry.world_size)
    outcome = world.run(
        entry.target("train_buggy"),
        entry.schedule,
        timeout=BUGGY_TIMEOUT,
        checks=entry.build_checks(),
    )
    assert outcome.status != "passed", _describe(outcome)
    if entry.needs_check:
        assert outcome.violations, "a silent bug must be caught by a check, not by a crash"
