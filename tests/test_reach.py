"""The reached fault space: recorded in a baseline run, drawn from with weight on user
code, split into disjoint shards; and the coverage a campaign reports."""

from __future__ import annotations

import json

import pytest
from helpers import fit, pl, tiny_model_class
from hypothesis import HealthCheck, given, settings

import chaoslight
from chaoslight import Event, Schedule
from chaoslight._checks._reach import ReachRecorder, user_sites
from chaoslight._search._coverage import coverage
from chaoslight._search._reach import Reach
from chaoslight._search._recovery import RESUME_SITES
from chaoslight.strategies import schedules

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Outcome:
    """Just the events an outcome carries."""

    def __init__(self, events: list[Event]) -> None:
        self.events = events


def observation(rank: int, steps: dict[str, list[int | None]], user: list[str]) -> Event:
    detail = json.dumps({"steps": steps, "user": user})
    return Event("observation", "reach", rank, None, 0.0, 0.0, detail=detail)


REACH = Reach.from_outcome(
    Outcome(
        [
            observation(0, {"lightning.training_step": [0, 1, 2], "dist.barrier": [None]}, []),
            observation(
                1,
                {"lightning.training_step": [0, 1, 2], "lightning.on_train_epoch_end": [2]},
                ["lightning.on_train_epoch_end"],
            ),
        ]
    )
)


def test_reach_merges_every_ranks_points_and_user_sites() -> None:
    """The points are the union over ranks, earliest step first; user sites are kept."""
    assert REACH is not None
    assert REACH.points == (
        ("dist.barrier", None),
        ("lightning.training_step", 0),
        ("lightning.training_step", 1),
        ("lightning.on_train_epoch_end", 2),
        ("lightning.training_step", 2),
    )
    assert REACH.user == {"lightning.on_train_epoch_end"}
    assert Reach.from_outcome(Outcome([])) is None


@FAST
@given(schedule=schedules(world_size=2, reach=REACH))
def test_schedules_draw_only_reached_points(schedule: Schedule) -> None:
    """With a reach, every fault sits at a (site, step) point the run reached, but a fault
    bound to the restarted run where it reads its checkpoint (never reached by the baseline)."""
    assert REACH is not None
    for fault in schedule:
        resuming = fault.run == 2 and fault.site in RESUME_SITES and fault.step is None
        assert resuming or (fault.site, fault.step) in REACH.points


def test_shards_are_disjoint_and_cover_the_reach() -> None:
    """Shards 0/3, 1/3, 2/3 split the points with nothing shared and nothing lost."""
    assert REACH is not None
    parts = [set(REACH.shard(i, 3).points) for i in range(3)]
    assert set().union(*parts) == set(REACH.points)
    assert sum(len(p) for p in parts) == len(REACH.points)
    with pytest.raises(chaoslight.InvalidArgument, match="shard=3/3"):
        REACH.shard(3, 3)


def test_user_sites_are_the_hooks_the_users_classes_define() -> None:
    """A module's own training_step and hooks are user sites; Lightning's defaults are not."""

    class Mine(tiny_model_class()):  # type: ignore[misc]
        def on_train_epoch_end(self) -> None:
            pass

    found = user_sites(Mine(), [])
    assert "lightning.on_train_epoch_end" in found and "lightning.training_step" in found
    assert "lightning.on_validation_epoch_end" not in found


def test_a_datamodules_own_setup_is_a_user_site() -> None:
    """A LightningDataModule's setup (where rank 0 often writes a file the others read) is
    the user's code too."""

    class Data(pl().LightningDataModule):  # type: ignore[misc, name-defined]
        def setup(self, stage: str) -> None:
            pass

    assert "lightning.setup" not in user_sites(tiny_model_class()(), [])
    assert "lightning.setup" in user_sites(tiny_model_class()(), [], Data())


@pytest.mark.usefixtures("lightning_in_process")
def test_a_real_fit_records_its_reach_over_the_whole_run() -> None:
    """In a real fit the recorder sees every step of every epoch and the epoch-end hook."""
    with chaoslight.inject(checks=[ReachRecorder()]) as run:
        fit(max_steps=6, max_epochs=3, loader=None)
    reach = Reach.from_outcome(run)
    assert reach is not None
    steps = {step for site, step in reach.points if site == "lightning.training_step"}
    assert steps == set(range(6))
    assert any(site == "lightning.on_train_epoch_end" for site, _ in reach.points)
    assert "lightning.training_step" in reach.user


def test_coverage_counts_the_reached_points_faults_were_put_on() -> None:
    """Coverage says how many reached points the tried schedules put faults on, by kind."""
    tried = [
        Schedule(),
        Schedule.parse("oom@lightning.training_step rank=0 step=1"),
        Schedule.parse("delay@lightning.training_step rank=1 step=1 seconds=0.1"),
    ]
    summary = coverage(REACH, tried)
    assert (summary.reached, summary.tried, summary.examples) == (5, 1, 3)
    assert summary.kinds == {"oom": 1, "delay": 1}
    assert summary.line().startswith("explored: faults at 1 of 5 reached (site, step) points")


def test_probes_slow_each_ranks_write_and_fill_its_disk() -> None:
    """At the first reached torch.save, each rank gets a 1 s straggler (a reader that does
    not wait for the writer); every save and load gets a full disk."""
    reach = Reach(points=(("torch.save", 3), ("torch.load", 3), ("torch.save", 7)))
    texts = [str(schedule) for schedule in reach.probes(2, ["delay", "raise"])]
    assert not any(text.startswith("delay@torch.save rank=0 step=7") for text in texts)
    assert any(text.startswith("raise@torch.save rank=0 step=7") for text in texts)
    for rank in (0, 1):
        assert f"delay@torch.save rank={rank} step=3 seconds=1.0" in texts
        full = f"raise@torch.save rank={rank} step=3 exception=OSError"
        assert any(text.startswith(full) for text in texts)
        assert not any(t.startswith(f"delay@torch.load rank={rank}") for t in texts)
    no_delay = Reach(points=(("torch.save", 3),)).probes(2, ["raise"])
    assert not any(str(schedule).startswith("delay@") for schedule in no_delay)


def test_preemption_probes_notify_the_last_rank_then_every_ranks_process_group() -> None:
    """At the first training step: SIGTERM to the last rank alone, then to every rank's
    whole process group (a scheduler's notice, DataLoader workers included); none where
    preempt is not drawn or one rank has no peer to stop with."""
    reach = Reach(points=(("lightning.training_step", 0), ("lightning.training_step", 1)))
    texts = [str(schedule) for schedule in reach.probes(2, ["preempt"])]
    assert texts == [
        "preempt@lightning.training_step rank=1 step=0",
        "preempt@lightning.training_step step=0 group=true",
    ]
    assert not any("preempt" in str(schedule) for schedule in reach.probes(2, ["delay"]))
    assert reach.probes(1, ["preempt"]) == []


def test_the_abort_probe_takes_rank_0s_group_at_the_first_reduction_of_a_training_step() -> None:
    """pg_abort goes to rank 0 at the first reduction reached during training (not at the
    reductions Lightning runs in setup, step None); none without a reduction or a peer."""
    reach = Reach(
        points=(
            ("dist.all_reduce", None),
            ("lightning.training_step", 0),
            ("dist.barrier", 0),
            ("dist.all_reduce", 0),
            ("dist.all_reduce", 1),
        )
    )
    texts = [str(schedule) for schedule in reach.probes(2, ["pg_abort"])]
    assert texts == ["pg_abort@dist.all_reduce rank=0 step=0"]
    assert reach.probes(1, ["pg_abort"]) == []
    no_reduction = Reach(points=(("lightning.training_step", 0), ("dist.barrier", 0)))
    assert no_reduction.probes(2, ["pg_abort"]) == []


def test_the_flip_probe_spikes_rank_0s_loss_before_the_second_steps_loss() -> None:
    """One flip on rank 0, before the loss of the first step an optimizer step made the
    parameters of: the model's forward in a Trainer or a Fabric loop, the batch's fetch in
    a plain loop (its backward comes after the loss); none without a second step there or
    where flip is not drawn."""
    trainer = Reach(points=tuple(("lightning.training_step", s) for s in (0, 1, 2)))
    fabric = Reach(points=tuple(("fabric.forward", s) for s in (2, 0, 1)))
    plain = Reach(
        points=tuple((site, s) for site in ("torch.backward", "torch.next_batch") for s in (0, 1))
    )
    texts = [[str(s) for s in r.probes(2, ["flip"])] for r in (trainer, fabric, plain)]
    assert texts == [
        ["flip@lightning.training_step rank=0 step=1"],
        ["flip@fabric.forward rank=0 step=1"],
        ["flip@torch.next_batch rank=0 step=1"],
    ]
    assert trainer.probes(2, ["delay"]) == []
    assert Reach(points=(("fabric.forward", 0),)).probes(2, ["flip"]) == []


def test_a_check_that_cannot_judge_the_program_says_so_once_in_the_coverage() -> None:
    """replicas-in-sync in a loop with no DistributedDataParallel module (FSDP, or no
    process group) says at its first optimizer step that it has nothing to compare, once;
    the campaign's coverage note names it with the reason, and no longer among the checks
    that judged the loop."""
    import torch

    from chaoslight._checks._base import CANNOT_JUDGE
    from chaoslight.checks import DisjointShards, Evidence, FiniteLoss, ReplicasInSync

    observer = ReplicasInSync().observer()
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
    with chaoslight.inject(Schedule()) as run:
        for _ in range(3):
            observer.on_loop_after_optimizer_step(optimizer)
    said = [e for e in run.events if e.kind == "observation" and CANNOT_JUDGE in e.detail]
    assert [e.site for e in said] == ["replicas-in-sync"]
    assert ReplicasInSync().judge(Evidence(list(run.events))) == []

    reached = Event(
        "observation",
        "reach",
        0,
        None,
        1.0,
        1.0,
        "",
        0,
        json.dumps({"loop": True, "steps": {"torch.backward": [0, 1]}}),
    )

    class Baseline:
        events = [reached, *said]

    reach = Reach.from_outcome(Baseline())
    assert reach is not None and [check for check, _ in reach.unjudged] == ["replicas-in-sync"]
    checks = [ReplicasInSync(), FiniteLoss(), DisjointShards()]
    line = coverage(reach, [Schedule()], checks).line()
    assert "note: replicas-in-sync could not judge this program: no DistributedDataParallel" in line
    assert "judged, and by finite-loss at its steps" in line
