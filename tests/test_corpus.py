"""The corpus (examples/corpus): every correct program passes, every buggy twin does not.

Each run is judged as ``chaoslight fuzz`` judges it: by its default checks and the oracle
(``chaoslight.judge``, docs/explanation/oracle.md), on the session's World of each size.
A correct program is never expected to hang, so its runs get the full 30 s progress
timeout; a buggy twin that hangs is recognised after ``BUGGY_TIMEOUT`` seconds without
progress (a correct run reaches a site many times a second), which keeps the module
near two minutes on two cores.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # before any World starts: its workers unpickle our check

from examples.corpus import CORPUS, Entry  # noqa: E402

pytestmark = pytest.mark.slow

TIMEOUT = 30.0
BUGGY_TIMEOUT = 5.0

# tests/test_corpus_fuzz.py searches every 2-rank program with the default search (its
# baseline runs each version with no fault); here: the programs it cannot (3 ranks), and
# every correct program under its twin's revealing schedule.
ORDERED = [entry for entry in CORPUS if entry.world_size != 2]
WITH_SCHEDULE = [entry for entry in CORPUS if entry.schedule]


@pytest.fixture
def worlds(request: pytest.FixtureRequest) -> Any:
    """The session's World of each world size, started on first use."""
    return lambda size: request.getfixturevalue(f"world{size}")


def _run(worlds: Any, entry: Entry, function: str, schedule: str, timeout: float) -> Any:
    """Run one version of ``entry`` and judge it; return (verdict, outcome)."""
    from chaoslight import judge

    world = worlds(entry.world_size)
    outcome = world.run(
        entry.target(function), schedule, timeout=timeout, checks=entry.build_checks()
    )
    return judge(outcome), outcome


def _describe(verdict: Any, outcome: Any) -> str:
    return f"{verdict.reason}\n{outcome.report()[-3000:]}"


@pytest.mark.parametrize("entry", ORDERED, ids=lambda entry: entry.name)
@pytest.mark.usefixtures("lightning_in_process")
def test_correct_program_passes(worlds: Any, entry: Entry) -> None:
    """train() passes with no fault and every check the entry names."""
    verdict, outcome = _run(worlds, entry, "train", "", TIMEOUT)
    assert outcome.status == "passed", _describe(verdict, outcome)
    assert not verdict.failed, _describe(verdict, outcome)


@pytest.mark.parametrize("entry", WITH_SCHEDULE, ids=lambda entry: entry.name)
def test_correct_program_passes_the_revealing_schedule(worlds: Any, entry: Entry) -> None:
    """train() is judged correct under the schedule that breaks its buggy twin."""
    verdict, outcome = _run(worlds, entry, "train", entry.schedule, TIMEOUT)
    assert not verdict.failed, _describe(verdict, outcome)


@pytest.mark.parametrize("entry", ORDERED, ids=lambda entry: entry.name)
def test_buggy_twin_does_not_pass(worlds: Any, entry: Entry) -> None:
    """train_buggy() fails, hangs or crashes under its documented schedule."""
    verdict, outcome = _run(worlds, entry, "train_buggy", entry.schedule, BUGGY_TIMEOUT)
    assert verdict.failed, _describe(verdict, outcome)
    assert outcome.status != "passed", _describe(verdict, outcome)
    if entry.needs_check:
        assert outcome.violations, "a silent bug must be caught by a check, not by a crash"
