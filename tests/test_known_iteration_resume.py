"""Lightning's resume of an iteration-based fit from an epoch-end checkpoint (max_steps set:
FitLoop.on_run_start leaves the restored epoch uncounted) is reported apart as its known
issue on real 2-rank restarted jobs; a correct program that checkpoints by steps is clean,
and a program's own restart bug under max_epochs stays the program's."""

from __future__ import annotations

from typing import Any

import pytest

from chaoslight import Schedule, judge
from chaoslight._search import DEFAULT_CHECKS

PLAN = "restarts 1\ncrash@lightning.training_step rank=0 step=6"
ISSUE = "lightning-iteration-resume-epoch-end"
TWIN = "examples/known_issues/iteration_resume.py:"


def judged(world: Any, target: str) -> Any:
    outcome = world.run(target, Schedule.parse(PLAN), checks=list(DEFAULT_CHECKS), timeout=60)
    return judge(outcome)


@pytest.mark.slow
@pytest.mark.parametrize(
    "target", [TWIN + "train", "examples/restart/resume_shapes.py:iteration_based"]
)
def test_an_epoch_end_resume_under_max_steps_is_lightnings_known_issue(
    world2: Any, target: str
) -> None:
    """Crashed at step 6 and resumed from the epoch-end last.ckpt under max_steps: the
    restart-equivalence finding is set apart as Lightning's known issue."""
    verdict = judged(world2, target)
    assert verdict.failed and "restart-equivalence" in verdict.reason, verdict.reason
    assert verdict.known is not None and verdict.known.issue.key == ISSUE, verdict.reason


@pytest.mark.slow
def test_checkpointing_every_epochs_worth_of_steps_resumes_clean(world2: Any) -> None:
    """The workaround (ModelCheckpoint(every_n_train_steps=steps per epoch)) resumes exactly."""
    verdict = judged(world2, TWIN + "train_fixed")
    assert not verdict.failed, verdict.reason


@pytest.mark.slow
def test_a_lost_warmup_counter_under_max_epochs_stays_the_programs(world2: Any) -> None:
    """warmup_counter.py:train_buggy's own restart bug is not taken for Lightning's."""
    verdict = judged(world2, "examples/restart/warmup_counter.py:train_buggy")
    assert verdict.failed and verdict.known is None, verdict.reason
