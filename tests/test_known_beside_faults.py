"""Verdicts that hold for a whole search, on real 2-rank runs: Lightning's SIGTERM issue
stays Lightning's whatever other fault fires beside the preemption, and a pause is judged
the same as a freeze and as a delay.

The five schedules are the ones a 150-second default search drew on correct programs and
blamed on them before the known issue claimed its symptoms whatever else fired (issue
28); ``examples/known_issues/sigterm_beside_faults.py`` is a correct program shaped like
those (``sync_dist`` logging every step, a resumable checkpoint)."""

from __future__ import annotations

from typing import Any

import pytest
from outcome_records import recorded

from chaoslight import Schedule, judge
from chaoslight._search import DEFAULT_CHECKS

TARGET = "examples/known_issues/sigterm_beside_faults.py:train"
SITE = "lightning.training_step"
BESIDE = {
    "a freeze": f"preempt@{SITE} step=0 after=0.3\nfreeze@{SITE} rank=0 step=0 seconds=0.5",
    "a delay and a flip": (
        f"delay@{SITE} rank=0 step=0 seconds=0.05\npreempt@{SITE} rank=0 step=6\n"
        f"flip@{SITE} rank=0 step=0"
    ),
    "a restart, a delay and a flip of optimizer state": (
        "restarts 1\ndelay@dist.barrier rank=0 step=7 seconds=0.5\n"
        f"preempt@{SITE} step=0 after=0.3\n"
        "flip@dist.barrier rank=0 target=optimizer_state tensor=2 index=5 bit=sign"
    ),
    # Found by the default search (train_fixed, 60 s): rank 0 waits in the per-batch
    # broadcast, rank 1 in the same function's barrier.
    "two delays and a notice before the first step": (
        f"delay@{SITE} rank=0 step=0 seconds=0.05\ndelay@{SITE} rank=0 step=0 seconds=0.05\n"
        "preempt@lightning.on_train_start rank=0"
    ),
    "a repeated batch": (
        f"repeat_batch@lightning.next_batch rank=0 step=0\npreempt@{SITE} rank=0 step=0"
    ),
    "a restart, a flip and a reorder": (
        f"restarts 1\npreempt@{SITE} rank=0 step=0\n"
        "flip@dist.broadcast_object_list rank=0 target=optimizer_state\n"
        "reorder@dist.all_reduce step=3"
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BESIDE))
def test_lightnings_sigterm_issue_stays_lightnings_beside_another_fault(
    world2: Any, name: str
) -> None:
    """The preemption with another fault beside it: the run is never the program's
    finding; where it failed, Lightning's issue explains every symptom."""
    schedule = Schedule.parse(BESIDE[name])
    outcome = world2.run(TARGET, schedule, checks=list(DEFAULT_CHECKS), timeout=20)
    verdict = judge(outcome)
    assert not verdict.is_finding(), f"{name}: {verdict.reason}\n{verdict.accounts}"
    if verdict.failed:
        assert verdict.known is not None and not verdict.findings, verdict.accounts
        assert verdict.known.issue.key == "lightning-sigterm-broadcast"


@pytest.mark.slow
def test_a_freeze_and_a_delay_of_the_same_length_find_the_same_race(world2: Any) -> None:
    """``examples/catalogue/shared_file.py:train_buggy`` races on a shared file at each
    epoch end; a 0.5 s straggler there makes the replicas part. The same pause as a
    freeze its rank comes back from gets the same verdict: a finding."""
    verdicts = []
    for kind in ("delay", "freeze"):
        pause = Schedule.parse(f"{kind}@lightning.on_train_epoch_end rank=0 step=3 seconds=0.5")
        outcome = world2.renew().run(
            "examples/catalogue/shared_file.py:train_buggy",
            pause,
            checks=list(DEFAULT_CHECKS),
            timeout=20,
        )
        verdicts.append(judge(outcome))
    delay, freeze = verdicts
    assert delay.failed and freeze.failed, (delay.reason, freeze.reason)
    assert delay.rule == freeze.rule and delay.signature() == freeze.signature()


def test_the_recorded_runs_keep_their_verdicts() -> None:
    """The same schedules' recorded runs (``tests/outcomes/``), judged without a World:
    Lightning's issue for each preemption beside another fault; the race failed alike
    under the freeze and the delay; an OOM swallowed beside a repeated batch named as the
    OOM swallowed; a flip's damage carried into the restart excuses what it does there."""
    runs = recorded()
    for name in [n for n in runs if n.startswith("sigterm_")]:
        verdict = judge(runs[name])
        assert verdict.failed and verdict.known is not None, (name, verdict.reason)
        assert verdict.known.issue.key == "lightning-sigterm-broadcast" and not verdict.findings
    freeze, delay = judge(runs["race_under_freeze"]), judge(runs["race_under_delay"])
    assert freeze.failed and freeze.signature() == delay.signature()
    swallowed = judge(runs["swallowed_oom_beside_repeat"])
    assert swallowed.is_finding() and "swallowed the injected oom@" in swallowed.reason
    assert not judge(runs["restart_carries_flip"]).failed
