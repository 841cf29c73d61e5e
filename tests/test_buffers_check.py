"""buffers-in-sync compares norm statistics only where a correct program has them in
sync: right after DDP's broadcast, or at the end of training when DDP does not broadcast;
other floating buffers only where the fault-free reference had them equal."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from chaoslight import Event, Schedule, World
from chaoslight._runtime._evidence import OBSERVATION
from chaoslight.checks import BuffersInSync, Evidence, RankView

NAMES = ["bn.running_mean", "bn.running_var", "cache"]
NORM = [True, True, False]
SAME = [[1.0, 2.0, 3], [4.0, 5.0, 6], [7.0, 8.0, 9]]


def sums(mean: float = 1.0, cache: float = 7.0) -> list[list[Any]]:
    """Checksums of the three buffers; ``mean`` and ``cache`` move their first sum."""
    return [[mean, 2.0, 3], SAME[1], [cache, 8.0, 9]]


def event(rank: int, step: int | None, facts: dict[str, Any], check: str) -> Event:
    return Event(OBSERVATION, check, rank, step, 0.0, 0.0, detail=json.dumps(facts))


def run(
    mode: str,
    points: Sequence[tuple[str, Any, int | None, dict[int, list[list[Any]]]]],
    schedule: Any = None,
    passed: bool = True,
) -> Evidence:
    """Evidence of one fit on two ranks: the mode, then (point, epoch, step, sums by rank)."""
    check = BuffersInSync.name
    events = [
        event(rank, None, {"fit": 0, "mode": mode, "names": NAMES, "norm": NORM}, check)
        for rank in (0, 1)
    ]
    for point, epoch, step, by_rank in points:
        for rank, values in by_rank.items():
            facts = {"fit": 0, "point": point, "epoch": epoch, "names": NAMES, "sums": values}
            events.append(event(rank, step, facts, check))
    status = "passed" if passed else "failed"
    ranks = {rank: RankView(rank, status) for rank in (0, 1)}
    return Evidence(events, ranks, schedule=schedule, target="t.py:train")


def judged(evidence: Evidence, reference: Evidence | None = None) -> list[Any]:
    """The check's verdict, with ``reference`` as the fault-free rerun when one is asked."""
    check = BuffersInSync()

    def rerun(*args: Any, **kwargs: Any) -> Evidence:
        assert reference is not None, "no reference run was expected"
        return reference

    return check.judge_reruns(evidence, rerun, Path("."))


UNSYNCED = {0: sums(1.0), 1: sums(1.5)}
SYNCED = {0: sums(), 1: sums()}


def test_statistics_that_differ_after_a_broadcast_are_named_with_their_step() -> None:
    """A running mean that differs right after DDP's broadcast is reported at that step."""
    evidence = run("forward", [("forward", None, 1, SYNCED), ("forward", None, 2, UNSYNCED)])
    (violation,) = judged(evidence)
    assert violation.step == 2 and "'bn.running_mean'" in violation.message
    assert "right after DDP broadcast" in violation.message


def test_statistics_in_sync_after_every_broadcast_pass() -> None:
    """Equal statistics at every broadcast: no violation."""
    assert judged(run("forward", [("forward", None, s, SYNCED) for s in (1, 2, 3)])) == []


def test_never_averaged_statistics_are_found_at_the_first_epoch_end() -> None:
    """broadcast_buffers=False, statistics apart at every epoch end and at the end: found,
    naming the first epoch end."""
    points = [
        ("epoch", 0, 4, UNSYNCED),
        ("epoch", 1, 8, UNSYNCED),
        ("end", "train", 12, UNSYNCED),
        ("end", "fit", 12, UNSYNCED),
    ]
    (violation,) = judged(run("epoch", points))
    assert "at the end of epoch 0" in violation.message
    assert "distribute_bn" in violation.cause


def test_statistics_averaged_only_at_the_end_of_training_pass() -> None:
    """A program that averages its statistics in its own on_train_end is in sync at fit
    end: the epochs in between are not judged."""
    points = [("epoch", 0, 4, UNSYNCED), ("end", "train", 8, UNSYNCED), ("end", "fit", 8, SYNCED)]
    assert judged(run("epoch", points)) == []


def test_a_run_that_did_not_pass_everywhere_is_not_judged() -> None:
    """A failed rank: the oracle would not count a plain violation; none is computed."""
    points = [("end", "train", 8, UNSYNCED), ("end", "fit", 8, UNSYNCED)]
    assert judged(run("epoch", points, passed=False)) == []


def test_a_per_rank_buffer_outside_norm_layers_is_left_alone() -> None:
    """A float buffer that differs across ranks in the fault-free run itself (a per-rank
    cache) is no evidence: the run is its own reference."""
    apart = {0: sums(cache=7.0), 1: sums(cache=9.0)}
    assert judged(run("forward", [("forward", None, 1, apart)])) == []


def test_a_buffer_equal_in_the_reference_that_parts_under_faults_is_found() -> None:
    """A non-norm buffer equal at every point of the fault-free run, apart under a
    schedule: found, after asking for the reference."""
    schedule = Schedule.parse("delay@lightning.training_step rank=0 seconds=0.1")
    apart = {0: sums(cache=7.0), 1: sums(cache=9.0)}
    reference = run("forward", [("forward", None, 1, SYNCED)], schedule=Schedule())
    (violation,) = judged(run("forward", [("forward", None, 1, apart)], schedule), reference)
    assert "'cache'" in violation.message


def test_integer_buffers_are_not_tracked() -> None:
    """num_batches_tracked is an integer: not among the tracked buffers."""
    import torch

    from chaoslight._checks._buffers import tracked_buffers

    names, norms, _ = tracked_buffers(torch.nn.Sequential(torch.nn.BatchNorm1d(3)), set())
    assert names == ["0.running_mean", "0.running_var"] and norms == [True, True]


BUGS = "examples/bugs/unsynced_batchnorm.py"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("target", "found"),
    [
        (f"{BUGS}:train_buggy", True),
        (f"{BUGS}:train_fixed", False),
        ("examples/shapes/batchnorm_dropout.py:train", False),
        ("examples/shapes/frozen_backbone.py:train", False),
        ("examples/shapes/swa_callback.py:train", False),
    ],
)
def test_real_programs(world2: World, target: str, found: bool) -> None:
    """The planted BatchNorm bug is found at its first epoch end; correct BatchNorm
    programs (DDP's broadcast, averaged statistics, frozen, SWA) pass."""
    outcome = world2.run(target, Schedule(), timeout=60, checks=[BuffersInSync()])
    assert bool(outcome.violations) == found, outcome.report()
    if found:
        assert "at the end of epoch 0" in outcome.violations[0].message
