"""The default search reaches where bugs hide: a race between two hooks at an epoch
boundary, an error only at the last step of an epoch, a collective one rank issues alone.
Each found within 60 examples and shrunk to the fault that matters; fixed twins pass."""

from __future__ import annotations

from pathlib import Path

import pytest

import chaoslight
from chaoslight import World
from chaoslight._search._campaign import BASELINE, CLEAN, FOUND

pytestmark = [pytest.mark.slow, pytest.mark.quality]

PLANTED = Path(__file__).resolve().parent.parent / "examples" / "planted"
BUDGET = 60
TIMEOUT = 10.0


@pytest.fixture
def world(world2: World) -> World:
    """The session's 2-rank World, for these campaigns."""
    return world2


def search(
    world: World, program: str, function: str, budget: int = BUDGET, seconds: float | None = None
) -> object:
    result, _ = chaoslight.fuzz(
        f"{PLANTED}/{program}.py:{function}",
        max_examples=budget,
        max_time=seconds,
        seed=0,
        timeout=TIMEOUT,
        # No replay: the first one starts a fresh World (seconds); what is asserted here is
        # the search's reach and shrink, and tests/test_fuzz.py pins replays down.
        replays=0,
        world=world,
    )
    return result


def test_a_race_between_two_hooks_is_found_by_a_straggler_at_the_epoch_end(
    world: World,
) -> None:
    """A write at epoch end raced by a read at the next epoch's start: one delay on rank 0
    at the last step of epoch 0, shortened to the smallest grid point that still fails."""
    result = search(world, "epoch_race", "train")
    assert result.status == FOUND, result.verdict  # type: ignore[attr-defined]
    (fault,) = result.schedule  # type: ignore[attr-defined]
    assert (fault.kind, fault.site, fault.rank, fault.step) == (
        "delay",
        "lightning.on_train_epoch_end",
        0,
        7,
    )
    assert fault.seconds <= 1.0
    assert result.examples <= BUDGET + 20  # type: ignore[attr-defined]  (with shrinks, replays)


def test_an_error_only_at_an_epochs_last_step_is_found(world: World) -> None:
    """A full disk at the epoch-end save on rank 0, swallowed there, desyncs the ranks."""
    result = search(world, "epoch_end_save", "train")
    assert result.status == FOUND, result.verdict  # type: ignore[attr-defined]
    (fault,) = result.schedule  # type: ignore[attr-defined]
    assert (fault.kind, fault.site, fault.rank) == ("raise", "torch.save", 0)
    assert fault.exception == "OSError"


def test_a_collective_only_one_rank_issues_needs_no_fault(world: World) -> None:
    """A rank_zero_only log with sync_dist hangs by itself: found with the empty schedule."""
    result = search(world, "one_rank_collective", "train")
    assert result.status == BASELINE and len(result.schedule) == 0  # type: ignore[attr-defined]
    assert "dist." in result.verdict.reason  # type: ignore[attr-defined]


@pytest.mark.parametrize("program", ["epoch_race", "epoch_end_save", "one_rank_collective"])
def test_the_fixed_twins_pass_the_same_search(world: World, program: str) -> None:
    """Each fixed twin passes a default search (its first probes, for the suite's time:
    benchmarks/catalogue.py and benchmarks/shapes.py run long ones) with no false alarm."""
    result = search(world, program, "train_fixed", budget=8, seconds=6.0)
    assert result.status == CLEAN, result.verdict  # type: ignore[attr-defined]


def test_two_shards_explore_disjoint_points_and_each_reports_its_own_failure(
    world: World, tmp_path: Path
) -> None:
    """Workers --shard 0/2 and 1/2 on one database put faults on disjoint points, and the
    second does not stop on the first's stored failure (another shard's): it searches its
    own part and reports the failure found there (the planted OOM fails at every step)."""
    target = f"{PLANTED}/swallowed_oom.py:train"
    results = []
    for index in (0, 1):
        result, _ = chaoslight.fuzz(
            target, max_examples=30, seed=0, timeout=TIMEOUT, replays=1, world=world,
            database=str(tmp_path / "db"), shard=(index, 2),
        )  # fmt: skip
        results.append(result)
    first, second = results
    points = [{(f.site, f.step) for s in r.tried for f in s} for r in results]
    assert not (points[0] & points[1])
    assert first.status == FOUND and second.status == FOUND
    assert second.schedule != first.schedule
    assert {(f.site, f.step) for f in second.schedule} <= points[1]
