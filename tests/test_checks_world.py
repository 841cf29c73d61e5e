"""Checks across 2 ranks: each catches its usual bug in a real DDP program; the twin passes."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ddp_target
from hypothesis import HealthCheck, given, settings

from chaoslight import Schedule, World
from chaoslight.checks import (
    Deterministic,
    DisjointShards,
    ErrorsSurface,
    FiniteGrads,
    FiniteLoss,
    NoHang,
    ReplicasInSync,
)
from chaoslight.strategies import schedules

pytestmark = pytest.mark.slow

TIMEOUT = 20.0
target = ddp_target


@pytest.fixture
def world(world2: World) -> World:
    """The session's 2-rank World."""
    return world2


def only(outcome: object, check: str) -> object:
    violations = [v for v in outcome.violations if v.check == check]  # type: ignore[attr-defined]
    assert len(violations) == 1, outcome.report()  # type: ignore[attr-defined]
    return violations[0]


def test_replicas_in_sync_names_step_and_parameter(world: World) -> None:
    """A weight edited on rank 0 at the end of step 1 is caught at step 2, naming the parameter.

    The observer runs before the module's own on_train_batch_end, where the edit happens.
    """
    outcome = world.run(
        target("rank_zero_edit"), Schedule(), timeout=TIMEOUT, checks=[ReplicasInSync()]
    )
    assert outcome.status == "failed"
    violation = only(outcome, "replicas-in-sync")
    assert violation.step == 2 and "'layer.weight'" in violation.message  # type: ignore[attr-defined]
    assert "rank_zero_only" in str(violation)
    assert not world.run(
        target("plain"), Schedule(), timeout=TIMEOUT, checks=[ReplicasInSync()]
    ).violations


def test_replicas_in_sync_catches_a_dropped_gradient_sync(world: World) -> None:
    """A skipped gradient-bucket reduction on rank 1 is caught at the step it happened."""
    outcome = world.run(
        target("plain"),
        "drop_sync@dist.gradient_allreduce rank=1 step=2",
        timeout=TIMEOUT,
        checks=[ReplicasInSync()],
    )
    assert only(outcome, "replicas-in-sync").step == 2  # type: ignore[attr-defined]


def test_disjoint_shards_catches_missing_distributed_sampler(world: World) -> None:
    """Without a DistributedSampler both ranks see every sample: DisjointShards fails."""
    outcome = world.run(
        target("no_distributed_sampler"), Schedule(), timeout=TIMEOUT, checks=[DisjointShards()]
    )
    assert "seen by more than one rank" in str(only(outcome, "disjoint-shards"))
    assert not world.run(
        target("plain"), Schedule(), timeout=TIMEOUT, checks=[DisjointShards()]
    ).violations


def test_disjoint_shards_judges_samples_by_the_samplers_lightning_built(world: World) -> None:
    """Rows repeated in the data set pass under Lightning's DistributedSampler; a sampler
    built by hand with rank=0 on every rank is named, part by part."""
    repeated = world.run(
        target("repeated_rows"), Schedule(), timeout=TIMEOUT, checks=[DisjointShards()]
    )
    assert repeated.passed, repeated.report()
    fixed = world.run(
        target("fixed_rank_sampler"), Schedule(), timeout=TIMEOUT, checks=[DisjointShards()]
    )
    assert "rank 0: part 0 of 2, rank 1: part 0 of 2" in str(only(fixed, "disjoint-shards"))


def test_a_parameter_unfrozen_after_ddp_was_built_is_named_as_the_cause(world: World) -> None:
    """BackboneFinetuning unfreezes a backbone DDP never syncs: replicas-in-sync names the
    frozen-at-wrap parameter as the cause, with Lightning's issue."""
    outcome = world.run(
        target("backbone_finetuning"), Schedule(), timeout=TIMEOUT, checks=[ReplicasInSync()]
    )
    violation = only(outcome, "replicas-in-sync")
    assert "'backbone." in violation.message  # type: ignore[attr-defined]
    assert "#20340" in violation.cause  # type: ignore[attr-defined]


def test_finite_loss_and_grads_name_rank_and_step(world: World) -> None:
    """A log(0) on rank 1 at step 2 is reported on rank 1 at step 2 by both finite checks."""
    outcome = world.run(
        target("nan_loss_on_rank_1"),
        Schedule(),
        timeout=TIMEOUT,
        checks=[FiniteLoss(), FiniteGrads()],
    )
    loss = only(outcome, "finite-loss")
    assert (loss.rank, loss.step) == (1, 2)  # type: ignore[attr-defined]
    assert only(outcome, "finite-grads").step == 2  # type: ignore[attr-defined]


def test_errors_surface_catches_swallowed_oom_across_ranks(world: World) -> None:
    """An OOM swallowed on rank 1 fails ErrorsSurface; letting it propagate passes."""
    schedule = "oom@lightning.forward rank=1 step=1"
    outcome = world.run(
        target("swallowed_oom"), schedule, timeout=TIMEOUT, checks=[ErrorsSurface()]
    )
    violation = only(outcome, "errors-surface")
    assert violation.rank == 1 and "swallowed" in violation.message  # type: ignore[attr-defined]
    fixed = world.run(target("plain"), schedule, timeout=TIMEOUT, checks=[ErrorsSurface()])
    assert fixed.status == "failed" and not fixed.violations, fixed.report()


def test_no_hang_reports_a_dropped_collective(world: World) -> None:
    """A dropped all-reduce on rank 1 is a hang: NoHang names where the ranks wait."""
    # The synchronised log after the backward: rank 0 then waits alone in its all-reduce.
    outcome = world.run(
        f"{Path(__file__).resolve().parent}/world_targets.py:log_at_batch_end",
        "drop_sync@dist.all_reduce rank=1 step=1",
        timeout=TIMEOUT,
        checks=[NoHang(2.0)],
    )
    assert outcome.status == "hung"
    assert "dist.all_reduce" in str(only(outcome, "no-hang"))


def test_deterministic_catches_unseeded_init(world: World) -> None:
    """Two runs of an unseeded program part at step 0; the seeded twin passes."""
    outcome = world.run(
        target("unseeded"), Schedule(), timeout=TIMEOUT, checks=[Deterministic(runs=2)]
    )
    assert only(outcome, "deterministic").step == 0  # type: ignore[attr-defined]
    assert not world.run(
        target("seeded"), Schedule(), timeout=TIMEOUT, checks=[Deterministic(runs=2)]
    ).violations


ALL_CHECKS = [
    ReplicasInSync(atol=1e-3),
    FiniteLoss(),
    FiniteGrads(),
    DisjointShards(),
    ErrorsSurface(),
    NoHang(10.0),
]


@settings(
    max_examples=15,  # benchmarks/false_alarms.py and benchmarks/shapes.py run many more
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
@given(
    schedule=schedules(
        world_size=2,
        steps=4,
        faults=["delay", "reorder", "allocate"],  # the kinds a correct program survives
        max_faults=3,
        sites=[
            "lightning.training_step",
            "lightning.on_train_batch_end",
            "dist.all_reduce",
            "dist.gradient_allreduce",
            "lightning.backward",
        ],
    )
)
def test_no_false_alarms_on_benign_schedules(world: World, schedule: Schedule) -> None:
    """A correct program passes every check under 15 benign schedules on 2 ranks."""
    outcome = world.run(target("plain"), schedule, timeout=TIMEOUT, checks=ALL_CHECKS)
    assert outcome.passed and not outcome.violations, outcome.report()


def test_resume_equivalence_catches_state_missing_from_the_checkpoint(world: World) -> None:
    """A callback whose state is not checkpointed ends differently after crash and restart."""
    from chaoslight.checks import ResumeEquivalence

    outcome = world.run(
        target("checkpointed_with_lost_state"),
        Schedule(),
        timeout=TIMEOUT,
        checks=[ResumeEquivalence()],
    )
    violation = only(outcome, "resume-equivalence")
    assert violation.step == 4 and "ends differently" in violation.message  # type: ignore[attr-defined]
    assert "not in the checkpoint" in str(violation)
    fixed = world.run(
        target("checkpointed"), Schedule(), timeout=TIMEOUT, checks=[ResumeEquivalence()]
    )
    assert fixed.passed and not fixed.violations, fixed.report()


def test_resume_equivalence_mid_epoch_is_a_warning_with_lightnings_reason(world: World) -> None:
    """A mid-epoch restart of a plain loader ends elsewhere: a warning quoting Lightning,
    not a failure (a correct program may do it)."""
    from chaoslight.checks import ResumeEquivalence

    outcome = world.run(
        target("checkpointed_every_step"),
        Schedule(),
        timeout=TIMEOUT,
        checks=[ResumeEquivalence(crash_at_step=6)],
    )
    assert outcome.passed and outcome.violations, outcome.report()
    assert outcome.violations[0].warning  # type: ignore[attr-defined]
    assert "your dataloader is not resumable" in str(outcome.violations[0])


def test_two_fits_are_judged_fit_by_fit(world: World) -> None:
    """Two fits' epoch 0 and step 0 are not mixed up: the correct program passes, and a
    divergence only the second fit has is caught at its own step."""
    checks = [ReplicasInSync(), DisjointShards()]
    clean = world.run(target("two_fits"), Schedule(), timeout=TIMEOUT, checks=checks)
    assert clean.passed, clean.report()
    broken = world.run(target("two_fits_diverging"), Schedule(), timeout=TIMEOUT, checks=checks)
    violation = only(broken, "replicas-in-sync")
    assert violation.rank == 1, broken.report()  # type: ignore[attr-defined]
