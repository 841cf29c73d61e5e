"""Each rule of docs/explanation/oracle.md on real 2-rank Lightning programs: a correct one
and a buggy twin per rule, judged by ``chaoslight.judge`` as the search judges them."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ddp_target

import chaoslight
from chaoslight import World
from chaoslight._verdict._oracle import (
    BENIGN_RULE,
    FAILED_CLEANLY,
    HANG_RULE,
    NO_FAULT,
    RECOVERED,
    SWALLOWED,
)

pytestmark = pytest.mark.slow

TIMEOUT = 20.0
CHECKS = ["replicas-in-sync", "disjoint-shards", "finite-loss", "errors-surface"]
WORLD_TARGETS = f"{Path(__file__).resolve().parent}/world_targets.py"
EXAMPLE = f"{Path(__file__).resolve().parent.parent}/examples/ddp_train.py:train"


def judged(world: World, target: str, schedule: str = "") -> chaoslight.Verdict:
    outcome = world.run(target, schedule, timeout=TIMEOUT, checks=CHECKS)
    return chaoslight.judge(outcome)


def test_no_fault_correct_passes_and_a_broken_target_fails_with_its_own_error(
    world2: World,
) -> None:
    """With nothing injected a correct fit passes; a target that raises is named as the cause."""
    assert not judged(world2, ddp_target("plain")).failed
    broken = judged(world2, f"{WORLD_TARGETS}:raises_at_once")
    assert broken.failed and broken.rule == NO_FAULT
    assert "raised: ValueError: rank" in broken.reason


def test_benign_fault_correct_passes_and_a_drifting_program_fails(world2: World) -> None:
    """Under a straggler a correct fit passes; a rank-0-only weight edit breaks the replicas."""
    delay = "delay@lightning.on_train_batch_end rank=0 step=1 seconds=0.2"
    assert not judged(world2, ddp_target("plain"), delay).failed
    drift = judged(world2, ddp_target("rank_zero_edit"), delay)
    assert drift.failed and drift.rule == BENIGN_RULE and "replicas-in-sync" in drift.reason


def test_hard_fault_failing_cleanly_passes_and_a_swallowed_oom_fails(world2: World) -> None:
    """An OOM that ends its rank is allowed; one swallowed while a peer fails is the bug."""
    oom = "oom@lightning.forward rank=1 step=1"
    clean = judged(world2, ddp_target("plain"), oom)
    assert not clean.failed and clean.rule == FAILED_CLEANLY
    swallowed = judged(world2, ddp_target("swallowed_oom"), oom)
    assert swallowed.failed and swallowed.rule == SWALLOWED
    assert swallowed.reason.startswith("rank 1 swallowed the injected oom@lightning.forward")


def test_hard_fault_consistent_recovery_passes_and_a_lopsided_one_fails(world2: World) -> None:
    """Every rank skipping the OOM's batch is a recovery; one rank recovering alone drifts."""
    oom = "oom@lightning.forward rank=1 step=1"
    recovered = judged(world2, ddp_target("coordinated_skip"), oom)
    assert not recovered.failed and recovered.rule == RECOVERED
    lopsided = judged(world2, ddp_target("lopsided_recovery"), oom)
    assert lopsided.failed and lopsided.rule == RECOVERED
    assert "replicas-in-sync" in lopsided.reason


def test_desync_fault_only_a_hang_fails(world2: World) -> None:
    """A dropped all-reduce that aborts the peer ends: allowed; one that leaves ranks waiting
    is a hang."""
    drop = "drop_sync@dist.all_reduce rank=1 step=1"
    aborted = judged(world2, EXAMPLE, drop)  # gloo aborts the peer on the size mismatch
    assert not aborted.failed and aborted.rule == HANG_RULE
    hang = judged(world2, f"{WORLD_TARGETS}:log_at_batch_end", drop)
    assert hang.failed and hang.rule == HANG_RULE and hang.status == "hung"


def test_the_root_cause_leads_and_the_released_peer_is_marked_a_consequence(
    world2: World,
) -> None:
    """Rank 1's own FileNotFoundError comes first; rank 0's gloo error follows, marked."""
    verdict = judged(world2, ddp_target("missing_file_on_rank_1"))
    assert verdict.failed and verdict.rule == NO_FAULT
    assert verdict.reason.startswith("rank 1 raised: FileNotFoundError"), verdict.reason
    assert "consequence: rank 0 was released" in verdict.reason
