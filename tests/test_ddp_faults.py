"""Multi-rank faults in real DDP on CPU (gloo): reorders, dropped syncs, stragglers, OOMs."""

from __future__ import annotations

import time

import pytest
from conftest import ddp_target

import chaoslight
from chaoslight import Delay, DropSync, ReorderReduction, Schedule, World

pytestmark = pytest.mark.slow

TIMEOUT = 20.0
target = ddp_target


def values(outcome: chaoslight._world.Outcome) -> list[object]:
    assert outcome.status == "passed", outcome.report()
    return [rank.value for rank in outcome.ranks]


def test_reorder_at_world_size_3_changes_the_reduced_bits(world3: World) -> None:
    """At world size 3 a reversed all-reduce gives different bits than rank order."""
    plain = values(world3.run(target("reduce_random"), Schedule(), timeout=TIMEOUT))
    natural = values(
        world3.run(target("reduce_random"), "reorder@dist.all_reduce order=0,1,2", timeout=TIMEOUT)
    )
    reversed_ = values(
        world3.run(
            target("reduce_random"), "reorder@dist.all_reduce order=reversed", timeout=TIMEOUT
        )
    )
    assert natural[0] == natural[1] == natural[2]
    assert reversed_[0] == reversed_[1] == reversed_[2]
    assert reversed_[0] != natural[0]
    differing = sum(a != b for a, b in zip(reversed_[0], natural[0], strict=True))
    assert 0 < differing < len(natural[0])  # last bits, not the whole tensor
    assert plain[0] == plain[1]


def test_per_rank_order_makes_replicas_bitwise_different(world3: World) -> None:
    """A reorder on one rank only leaves that rank with other bits than the rest."""
    got = values(
        world3.run(
            target("reduce_random"),
            "reorder@dist.all_reduce rank=2 order=reversed",
            timeout=TIMEOUT,
        )
    )
    assert got[0] == got[1] != got[2]


def test_reorder_at_world_size_2_needs_compressed(world2: World) -> None:
    """At world size 2 a + b is b + a: reversed changes nothing, compressed changes bits."""
    natural = values(world2.run(target("reduce_random"), Schedule(), timeout=TIMEOUT))
    reversed_ = values(
        world2.run(
            target("reduce_random"), "reorder@dist.all_reduce order=reversed", timeout=TIMEOUT
        )
    )
    compressed = values(
        world2.run(
            target("reduce_random"),
            "reorder@dist.all_reduce rank=1 order=compressed",
            timeout=TIMEOUT,
        )
    )
    assert reversed_[0] == natural[0]
    assert compressed[0] == natural[0] != compressed[1]


def test_lightning_sync_dist_log_goes_through_the_reorder(world2: World) -> None:
    """self.log(sync_dist=True) reaches dist.all_reduce: the reorder fires there each step."""
    outcome = world2.run(
        target("logged_losses"),
        "reorder@dist.all_reduce rank=1 order=compressed times=*",
        timeout=TIMEOUT,
    )
    fired = [e for e in outcome.events if e.kind == "fired"]
    assert outcome.passed, outcome.report()
    assert (
        fired and {e.rank for e in fired} == {1} and {e.site for e in fired} == {"dist.all_reduce"}
    )


def test_per_rank_gradient_order_makes_parameters_differ(world2: World) -> None:
    """A compressed gradient reduction on rank 1 makes the replicas' parameters differ."""
    plain = values(world2.run(target("param_bits"), Schedule(), timeout=TIMEOUT))
    assert plain[0] == plain[1]
    fault = ReorderReduction("compressed", site="dist.gradient_allreduce", rank=1, times=None)
    got = values(world2.run(target("param_bits"), Schedule([fault]), timeout=TIMEOUT))
    assert got[0] != got[1]  # rank 1's weights drift, and so do its gradients after


def test_a_sparse_gradients_bucket_is_summed_as_the_backend_does(world2: World) -> None:
    """gloo gathers no sparse tensor: a reorder at a sparse embedding's gradient bucket
    (or a plain all-reduce of a sparse tensor) leaves the sum to the backend, and a correct
    program passes (it raised NotImplementedError from inside chaoslight before)."""
    outcome = world2.run(
        "examples/shapes/sparse_embedding.py:train",
        "reorder@dist.gradient_allreduce step=1",
        timeout=60,
    )
    assert outcome.passed, outcome.report()
    assert not chaoslight.judge(outcome).failed


def test_dropped_gradient_sync_diverges_silently(world2: World) -> None:
    """Rank 1 skipping one gradient-bucket reduction passes, with diverged replicas."""
    fault = DropSync(site="dist.gradient_allreduce", rank=1, step=1)
    outcome = world2.run(target("param_bits"), Schedule([fault]), timeout=TIMEOUT)
    got = values(outcome)
    assert got[0] != got[1]
    assert [(e.rank, e.step) for e in outcome.events if e.kind == "fired"] == [(1, 1)]


def test_straggler_in_the_backward_delays_every_rank(world2: World) -> None:
    """A delay inside rank 1's gradient hook holds rank 0 in the all-reduce too."""
    fast = world2.run(target("param_bits"), Schedule(), timeout=TIMEOUT)
    fault = Delay(0.5, site="dist.gradient_allreduce", rank=1, step=1)
    slow = world2.run(target("param_bits"), Schedule([fault]), timeout=TIMEOUT)
    assert values(slow) == values(fast)
    assert slow.wall_s >= 0.5 and fast.wall_s > 0  # the 0.5 s delay is inside the example


def test_oom_on_one_rank_fails_that_rank_and_releases_the_other(world2: World) -> None:
    """An OOM on rank 1 only: rank 1 raises OutOfMemoryError, rank 0 is released, no hang."""
    started = time.monotonic()
    outcome = world2.run(
        target("plain"), "oom@lightning.training_step rank=1 step=1", timeout=TIMEOUT
    )
    assert outcome.status == "failed", outcome.report()
    assert outcome.ranks[1].exception is not None
    assert outcome.ranks[1].exception.type == "OutOfMemoryError"
    assert outcome.ranks[1].exception.message.startswith("CUDA out of memory. Tried to allocate")
    assert outcome.ranks[0].status in ("released", "failed")
    assert time.monotonic() - started < TIMEOUT


def test_allocation_over_budget_on_one_rank(world2: World) -> None:
    """Under a budget, an Allocate on rank 0 only runs rank 0 out of memory."""
    schedule = (
        "budget limit_bytes=1MiB\nallocate@lightning.on_train_batch_start rank=0 step=2 nbytes=2MiB"
    )
    outcome = world2.run(target("plain"), schedule, timeout=TIMEOUT)
    assert outcome.ranks[0].exception is not None
    assert outcome.ranks[0].exception.type == "OutOfMemoryError"
    assert outcome.ranks[1].status != "failed" or outcome.ranks[1].exception.distributed  # type: ignore[union-attr]
