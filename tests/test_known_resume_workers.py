"""Lightning#21938 (2.5.3 and later): a fit resumed from an epoch-end checkpoint with
DataLoader workers trains its first resumed epoch on epoch 0's order. On real 2-rank
restarted jobs with the default checks: a correct program that hits it is reported apart
as Lightning's known issue; the workaround resumes clean; the same loader without workers
resumes clean; and a program whose own resume loses the sampler's epoch stays the
program's."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import judged_past_the_interpreter

from chaoslight import Schedule
from chaoslight._search import DEFAULT_CHECKS

PLAN = "restarts 1\ncrash@lightning.training_step rank=0 step=5"
ISSUE = "lightning-resume-workers-epoch-zero"
TWIN = "examples/known_issues/resume_workers_epoch_zero.py:"


def judged(world: Any, target: str, plan: str = PLAN) -> Any:
    """The verdict on one run (two loader workers each: a run CPython's fork race hung,
    reported apart, is run again)."""
    schedule, checks = Schedule.parse(plan), list(DEFAULT_CHECKS)
    return judged_past_the_interpreter(
        lambda: world.run(target, schedule, checks=checks, timeout=60)
    )


@pytest.mark.slow
def test_the_resumed_epoch_on_epoch_zeros_order_is_lightnings_known_issue(world2: Any) -> None:
    """Crashed in epoch 1 and resumed from the epoch-end last.ckpt with 2 loader workers:
    restart-equivalence's "other samples" finding is set apart as Lightning's."""
    verdict = judged(world2, TWIN + "train")
    assert verdict.failed and "trained other samples" in verdict.reason, verdict.reason
    assert verdict.known is not None and verdict.known.issue.key == ISSUE, verdict.reason


@pytest.mark.slow
def test_the_sampler_epoch_set_from_the_checkpoint_resumes_clean(world2: Any) -> None:
    """The workaround: the program's own DistributedSampler, its epoch set in
    on_load_checkpoint, trains the resumed epoch on its own order."""
    verdict = judged(world2, TWIN + "train_fixed")
    assert not verdict.failed, verdict.reason


@pytest.mark.slow
def test_a_resume_that_reads_epoch_zeros_order_without_workers_stays_the_programs(
    world2: Any,
) -> None:
    """plain_resume_sampler_epoch (a loop: no Lightning loader, no workers) reads epoch 0's
    order after its own resume: the program's finding, never Lightning's issue."""
    plan = "restarts 1\ncrash@torch.optimizer_step rank=0 step=13"
    verdict = judged(world2, "examples/loops/plain_resume_sampler_epoch.py:train_buggy", plan)
    assert verdict.failed and verdict.known is None, verdict.reason
