"""Lightning Fabric's loader sets its sampler's epoch from its own pass count, from 0 in a
restarted process: on real 2-rank restarted jobs with the default checks, a correct Fabric
loop that resumes past its first epoch is reported apart as Fabric's known issue; the
workaround (a loader Fabric does not wrap) resumes clean."""

from __future__ import annotations

from typing import Any

import pytest

from chaoslight import Schedule, judge
from chaoslight._search import DEFAULT_CHECKS

PLAN = "restarts 1\ncrash@torch.backward rank=0 step=12"
ISSUE = "fabric-loader-epoch-restarts"
TWIN = "examples/known_issues/fabric_loader_epoch.py:"


def judged(world: Any, target: str) -> Any:
    outcome = world.run(target, Schedule.parse(PLAN), checks=list(DEFAULT_CHECKS), timeout=60)
    return judge(outcome)


@pytest.mark.slow
def test_a_resumed_epoch_on_epoch_zeros_order_is_fabrics_known_issue(world2: Any) -> None:
    """Crashed in epoch 1 and resumed from the epoch-end checkpoint: the restarted run's
    first pass read epoch 0's order, set apart as Fabric's known issue."""
    verdict = judged(world2, TWIN + "train")
    assert verdict.failed and "trained on other samples" in verdict.reason, verdict.reason
    assert verdict.known is not None and verdict.known.issue.key == ISSUE, verdict.reason


@pytest.mark.slow
def test_a_loader_fabric_does_not_wrap_resumes_clean(world2: Any) -> None:
    verdict = judged(world2, TWIN + "train_fixed")
    assert not verdict.failed, verdict.reason
