"""``data-order`` in loops that no Trainer runs (``_checks/_order_loops.py``), in the
session's 2-rank World: a plain loop that never calls ``set_epoch`` reads every epoch in
the first one's order, and one whose ranks seed their samplers apart leaves samples to no
rank; the loop that calls it, and a Fabric loop (whose loader sets the epoch itself), are
clean; a validation loader, after which no backward runs, is not a training pass."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chaoslight import Schedule
from chaoslight._runtime._evidence import OBSERVATION
from chaoslight.checks import DataOrder

pytestmark = pytest.mark.slow
TIMEOUT = 60.0


def _run(world2: Any, target: str) -> Any:
    return world2.run(f"loop_targets:{target}", Schedule(), timeout=TIMEOUT, checks=[DataOrder()])


def _passes(outcome: Any) -> dict[int, list[int]]:
    """Each rank's recorded training passes (their sampler's epoch), in order."""
    seen: dict[int, list[int]] = {}
    for event in outcome.events:
        if event.kind == OBSERVATION and event.site == "data-order":
            facts = json.loads(event.detail)
            (loader,) = facts["loaders"]
            seen.setdefault(event.rank, []).append(loader["samplers"][0]["epoch"])
    return seen


def test_a_loop_that_never_sets_the_epoch_is_found_and_one_that_does_is_clean(
    world2: Any,
) -> None:
    buggy = _run(world2, "plain_forgets_set_epoch")
    (violation,) = buggy.violations
    assert violation.check == "data-order"
    assert "pass 1 draws the same samples in the same order as pass 0" in violation.message
    assert "set_epoch" in violation.cause
    # Three training passes per rank, at epoch 0; the evaluation loader's are not passes.
    assert _passes(buggy) == {0: [0, 0, 0], 1: [0, 0, 0]}
    fixed = _run(world2, "plain_sets_epoch")
    assert fixed.passed and not fixed.violations, fixed.report()
    assert _passes(fixed) == {0: [0, 1, 2], 1: [0, 1, 2]}


def test_ranks_that_seed_their_samplers_apart_leave_samples_to_no_rank(world2: Any) -> None:
    outcome = _run(world2, "plain_seed_per_rank")
    (violation,) = outcome.violations
    assert "was drawn by no rank" in violation.message and "seed" in violation.message


def test_a_fabric_loader_sets_its_own_epoch_and_is_clean(world2: Any) -> None:
    outcome = _run(world2, "fabric_epochs")
    assert outcome.passed and not outcome.violations, outcome.report()
    assert _passes(outcome) == {0: [0, 1, 2], 1: [0, 1, 2]}


def test_an_epoch_the_loop_trains_again_after_a_caught_error_is_not_a_lost_shuffle(
    world2: Any,
) -> None:
    schedule = Schedule.parse("raise@torch.backward step=2 exception=RuntimeError")
    outcome = world2.run(
        "loop_targets:plain_retries_an_epoch", schedule, timeout=TIMEOUT, checks=[DataOrder()]
    )
    assert _passes(outcome) == {0: [0, 0, 1], 1: [0, 0, 1]}  # the retried pass is recorded
    assert outcome.passed and not outcome.violations, outcome.report()
