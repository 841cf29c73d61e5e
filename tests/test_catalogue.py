"""The catalogue of failure modes (``examples/catalogue``): the default search finds every
buggy program it can, with the cause named; a memory budget's schedule file finds the
others; every fixed twin, and the robust program, comes out clean.

The budgets are small (the suite's time): ``benchmarks/catalogue.py`` runs the same
searches with 100 examples each, and the robust program under a long search. An entry
the search finds only past the suite's budget (``long_search``) is checked by replaying
the schedule the benchmark's search found (``witness``).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import Any

import pytest

import chaoslight
from chaoslight import World
from chaoslight._search import DEFAULT_CHECKS
from chaoslight._search._campaign import CLEAN, FOUND
from chaoslight._verdict._oracle import FAILED_CLEANLY, NO_FAULT

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # examples.catalogue
from examples.catalogue import CATALOGUE, HERE, ROBUST, Entry  # noqa: E402

slow = pytest.mark.slow
BUGGY_EXAMPLES = 20  # every searchable bug is found in its first 10 examples (benchmark)
BUGGY_SECONDS = 45.0
FIXED_EXAMPLES = 2  # a fixed twin: baseline, the first probes, two generated schedules
FIXED_SECONDS = 3.0
# A correct program never goes this long without progress here; a hang the wavefront
# cannot see (a preemption probe on a program waiting outside every site) costs this much.
FIXED_TIMEOUT = 8.0
ENTRIES = (*CATALOGUE, ROBUST)
SEARCHED = [(e, f) for e in CATALOGUE if e.searchable and not e.long_search for f in e.buggy]
BUDGETED = [e for e in CATALOGUE if e.schedule_file is not None]
WITNESSED = [e for e in CATALOGUE if e.witness is not None]


@pytest.fixture
def world(world2: World) -> World:
    """The session's 2-rank World, for the whole catalogue."""
    return world2


def fuzz(
    entry: Entry,
    function: str,
    world: World,
    examples: int,
    seconds: float,
    timeout: float | None = None,
) -> Any:
    """The default search (the entry's extra checks only), seeded, no replay: the fault-free
    baseline already runs twice, and a replay would start a second World."""
    result, _ = chaoslight.fuzz(
        entry.target(function),
        checks=[*DEFAULT_CHECKS, *entry.checks] if entry.checks else None,
        max_examples=examples,
        max_time=seconds,
        seed=0,
        timeout=timeout or entry.timeout,
        replays=0,
        world=world,
        strict="--strict" in entry.flags,  # a known framework issue counts as the finding
    )
    return result


def run(entry: Entry, function: str, schedule: Any, world: World) -> tuple[Any, Any]:
    """One run under ``schedule`` with the default checks, judged by the oracle."""
    checks = [chaoslight.checks.check_by_name(name) for name in (*DEFAULT_CHECKS, *entry.checks)]
    outcome = world.run(entry.target(function), schedule, timeout=entry.timeout, checks=checks)
    return chaoslight.judge(outcome), outcome


def names_all(reason: str, words: tuple[str, ...]) -> bool:
    return all(word.lower() in reason.lower() for word in words)


def functions_of(entry: Entry) -> set[str]:
    tree = ast.parse(entry.path.read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}


def test_the_table_lists_every_program_with_both_twins_and_its_command() -> None:
    """Every catalogue module is in the table, defines its functions, says its command."""
    modules = {p.stem for p in HERE.glob("*.py") if not p.stem.startswith("_")}
    assert modules == {e.name for e in ENTRIES}
    readme = (HERE / "README.md").read_text()
    for entry in ENTRIES:
        assert {*entry.buggy, entry.fixed} <= functions_of(entry), entry.name
        docstring = ast.get_docstring(ast.parse(entry.path.read_text())) or ""
        docstring = re.sub(r"\s*\\\n\s*", " ", docstring)  # a command continued with \
        for function in entry.buggy or (entry.fixed,):
            assert entry.command(function) in docstring, (entry.name, entry.command(function))
        assert entry.command() in readme, entry.name
        if entry.buggy:  # a bug the search misses has the schedule file that finds it
            assert (entry.finding is None) == (entry.schedule_file is not None), entry.name


@pytest.mark.parametrize("entry", BUDGETED, ids=lambda e: e.name)
def test_schedule_files_hold_the_memory_budget_the_search_does_not_draw(entry: Entry) -> None:
    """Each budget entry's schedule file parses, with a budget and no fault."""
    assert entry.schedule_file is not None
    schedule = chaoslight.Schedule.load(HERE / entry.schedule_file)
    assert schedule.memory_budget is not None and not schedule.faults


@slow
@pytest.mark.parametrize(("entry", "function"), SEARCHED, ids=lambda v: getattr(v, "name", v))
def test_the_default_search_finds_the_bug_and_names_its_cause(
    entry: Entry, function: str, world: World
) -> None:
    """The default search finds the buggy twin, names the cause; the fixed twin passes the
    schedule that broke it."""
    result = fuzz(entry, function, world, BUGGY_EXAMPLES, BUGGY_SECONDS)
    assert result.status == entry.finding, (result.status, result.verdict)
    assert not result.verdict.internal
    assert names_all(result.verdict.reason, entry.cause(function)), result.verdict.reason
    if entry.finding == FOUND:
        # On the same World: a thread the buggy twin's last example left running (an export
        # delayed by the fault, which once wrote into the next example's directory) makes
        # the World retire that rank process (tests/test_world.py tests it), so a fresh World
        # is not needed.
        assert entry.world_size == world.size
        verdict, _ = run(entry, entry.fixed, result.schedule, world)
        assert not verdict.failed, (str(result.schedule), verdict.reason)


def test_a_bug_too_slow_to_search_in_the_suite_has_a_witness_that_parses() -> None:
    """Every entry the suite does not search has the failing schedule it replays instead."""
    for entry in CATALOGUE:
        if entry.long_search:
            assert entry.searchable and entry.witness is not None, entry.name
        if entry.witness is not None:
            assert chaoslight.Schedule.from_text(entry.witness).faults, entry.name


@slow
@pytest.mark.parametrize("entry", WITNESSED, ids=lambda e: e.name)
def test_the_schedule_the_search_found_fails_the_buggy_twin_only(
    entry: Entry, world: World
) -> None:
    """The minimal schedule the default search found (benchmarks/catalogue.py) makes the
    buggy twin fail with its cause named, and the fixed twin pass."""
    assert entry.witness is not None
    schedule = chaoslight.Schedule.from_text(entry.witness)
    verdict, _ = run(entry, entry.main, schedule, world)
    assert verdict.failed and not verdict.internal, verdict.reason
    assert names_all(verdict.reason, entry.cause(entry.main)), verdict.reason
    assert not run(entry, entry.fixed, schedule, world)[0].failed


@slow
@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_the_fixed_twin_comes_out_clean(entry: Entry, world: World) -> None:
    """A short default search raises no alarm on the fixed twin (or the robust program)."""
    timeout = min(entry.timeout, FIXED_TIMEOUT)
    result = fuzz(entry, entry.fixed, world, FIXED_EXAMPLES, FIXED_SECONDS, timeout)
    assert result.status == CLEAN, (str(result.schedule), result.verdict)


@slow
@pytest.mark.parametrize("entry", BUDGETED, ids=lambda e: e.name)
def test_a_memory_budget_makes_the_buggy_twin_fail_promptly_and_the_fixed_fit(
    entry: Entry, world: World
) -> None:
    """Under the schedule file's budget the buggy twin runs out (every rank ends, none
    hangs), the fixed twin fits; without a budget the buggy twin passes (the miss)."""
    assert entry.schedule_file is not None
    schedule = chaoslight.Schedule.load(HERE / entry.schedule_file)
    verdict, outcome = run(entry, entry.main, schedule, world)
    assert verdict.failed and not verdict.internal and verdict.rule == NO_FAULT, verdict.reason
    assert outcome.status == "failed", outcome.status
    assert names_all(verdict.reason, entry.cause(entry.main)), verdict.reason
    assert not run(entry, entry.fixed, schedule, world)[0].failed
    assert not run(entry, entry.main, chaoslight.Schedule(), world)[0].failed


@slow
def test_a_deferred_oom_surfaces_late_and_is_a_clean_failure(world: World) -> None:
    """The deferred OOM of temporary_lifetime fires at the forward, surfaces at a later
    sync point, and ends its rank: a clean failure, not a finding."""
    entry = next(e for e in CATALOGUE if e.name == "temporary_lifetime")
    schedule = chaoslight.Schedule.load(HERE / "temporary_lifetime_deferred.txt")
    verdict, outcome = run(entry, entry.fixed, schedule, world)
    assert not verdict.failed and verdict.rule == FAILED_CLEANLY, verdict.reason
    rank0 = outcome.ranks[0].exception
    assert "deferred=true" in str(rank0) and "sync_point" in rank0.traceback
