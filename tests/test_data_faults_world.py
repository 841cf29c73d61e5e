"""The data-damaging faults on real 2-rank programs: each planted bug in
``examples/bugs`` is found under its fault, its twin is clean under the same schedule,
and a lost batch hangs even a correct program (why ``drop_batch`` is a desync)."""

from __future__ import annotations

from pathlib import Path

import pytest

import chaoslight
from chaoslight import World
from chaoslight._search._failure import DEFAULT_CHECKS

pytestmark = pytest.mark.slow

BUGS = Path(__file__).resolve().parent.parent / "examples" / "bugs"
TIMEOUT = 12.0

PAIRS = [
    ("nan_debug_dump", "flip@lightning.on_before_optimizer_step rank=1 step=2 target=param"),
    ("dedup_skip_step", "repeat_batch@lightning.next_batch rank=1 step=2"),
    ("resume_fresh_on_error", "bad_checkpoint@lightning.load_checkpoint rank=1"),
]


def judged(world: World, target: str, schedule: str) -> chaoslight.Verdict:
    outcome = world.run(target, schedule, timeout=TIMEOUT, checks=list(DEFAULT_CHECKS))
    return chaoslight.judge(outcome)


@pytest.mark.parametrize(("program", "schedule"), PAIRS)
def test_the_planted_bug_is_found_and_its_twin_is_clean(
    world2: World, program: str, schedule: str
) -> None:
    """``train_buggy`` fails the oracle under its fault; ``train_fixed`` passes it."""
    buggy = judged(world2, f"{BUGS / program}.py:train_buggy", schedule)
    fixed = judged(world2, f"{BUGS / program}.py:train_fixed", schedule)
    assert buggy.failed and not buggy.internal, buggy
    assert not fixed.failed, fixed.reason


def test_a_flip_is_noted_with_the_check_that_saw_it(world2: World) -> None:
    """The honest twin lets the flip show: the verdict notes replicas-in-sync saw it."""
    program, schedule = PAIRS[0]
    verdict = judged(world2, f"{BUGS / program}.py:train_fixed", schedule)
    (note,) = [n for n in verdict.notes if n.startswith("flip@")]
    assert "element 0 of layer.weight" in note and "was seen: replicas-in-sync" in note


def test_a_lost_batch_hangs_a_correct_program_and_names_the_fault(world2: World) -> None:
    """One rank's epoch one batch short: it returns while its peer waits; the reason names
    the drop that fired on that rank."""
    target = f"{BUGS / 'dedup_skip_step.py'}:train_fixed"
    verdict = judged(world2, target, "drop_batch@lightning.next_batch rank=1 step=2")
    assert verdict.failed and verdict.status == "hung"
    assert "rank 1 returned" in verdict.reason and "drop_batch@" in verdict.reason
