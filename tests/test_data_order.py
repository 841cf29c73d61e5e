"""data-order judges each epoch by what the program's own pipeline promises: a
DistributedSampler's coverage across ranks, a reshuffle where shuffling is promised."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    RandomSampler,
    SequentialSampler,
    TensorDataset,
    WeightedRandomSampler,
)
from torch.utils.data.distributed import DistributedSampler

from chaoslight import Event, Schedule, World
from chaoslight._checks._order_facts import distributed_indices, pipeline_facts
from chaoslight._runtime._evidence import OBSERVATION
from chaoslight.checks import DataOrder, Evidence

CHECK = DataOrder()


def sampler(rank: int, **changes: Any) -> dict[str, Any]:
    """The state of a DistributedSampler over 10 samples, part ``rank`` of 2."""
    facts = {"class": "DistributedSampler", "known": True, "wraps": False, "length": 10}
    facts |= {"shuffle": True, "seed": 0, "epoch": 0, "drop_last": False, "replicas": 2}
    return facts | {"rank": rank} | changes


def loader(samplers: list[dict[str, Any]], promises: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"samplers": samplers, "promises": list(promises), "replaced": None}


def evidence(epochs: dict[int, dict[int, dict[str, Any]]], batches: Any = None) -> Evidence:
    """Per epoch, each rank's train loader facts; ``batches``: epoch -> rank -> fingerprints."""
    events = []
    for epoch, ranks in epochs.items():
        for rank, facts in ranks.items():
            detail = {"fit": 0, "epoch": epoch, "loaders": [facts], "world_size": len(ranks)}
            events.append(
                Event(OBSERVATION, CHECK.name, rank, 0, 0.0, 0.0, detail=json.dumps(detail))
            )
    for epoch, ranks in (batches or {}).items():
        for rank, fingerprints in ranks.items():
            detail = {"fit": 0, "epoch": epoch, "batches": fingerprints}
            events.append(
                Event(OBSERVATION, CHECK.name, rank, 0, 0.0, 0.0, detail=json.dumps(detail))
            )
    return Evidence(events)


def per_rank(epoch: int = 0, **changes: Any) -> dict[int, dict[str, Any]]:
    return {rank: loader([sampler(rank, epoch=epoch, **changes)]) for rank in (0, 1)}


@pytest.mark.parametrize(
    ("length", "shuffle", "drop_last"),
    [(10, True, False), (11, True, False), (11, False, True), (3, True, False)],
)
def test_indices_are_the_samplers_own(length: int, shuffle: bool, drop_last: bool) -> None:
    """The recomputed indices are exactly torch's DistributedSampler's, padding included."""
    data = TensorDataset(torch.arange(float(length)))
    for rank in (0, 1):
        real: DistributedSampler[int] = DistributedSampler(
            data, 2, rank, shuffle=shuffle, seed=3, drop_last=drop_last
        )
        real.set_epoch(4)
        facts = sampler(rank, length=length, shuffle=shuffle, seed=3, epoch=4, drop_last=drop_last)
        assert distributed_indices(facts) == list(real)


def test_epochs_with_agreeing_advancing_samplers_pass() -> None:
    """Every rank's sampler agrees and the epoch moves: nothing to report."""
    assert CHECK.judge(evidence({0: per_rank(0), 1: per_rank(1)})) == []


def test_a_seed_per_rank_misses_samples_and_names_the_first() -> None:
    """DistributedSampler(seed=rank): the ranks permute differently; a sample is missed."""
    ranks = {rank: loader([sampler(rank, seed=rank)]) for rank in (0, 1)}
    (violation,) = CHECK.judge(evidence({0: ranks}))
    assert (
        "was drawn by no rank" in violation.message
        and "seed: rank 0 0, rank 1 1" in violation.message
    )


def test_data_sets_of_different_lengths_are_named() -> None:
    """A data set built per rank with another length: an index names another sample."""
    ranks = {0: loader([sampler(0)]), 1: loader([sampler(1, length=9)])}
    (violation,) = CHECK.judge(evidence({0: ranks}))
    assert "different lengths" in violation.message


def test_a_shuffling_sampler_that_stays_at_one_epoch_is_found() -> None:
    """shuffle=True and the same epoch twice: the same permutation in epoch 1."""
    (violation,) = CHECK.judge(evidence({0: per_rank(0), 1: per_rank(0)}))
    assert violation.message.startswith("epoch 1 draws the same samples in the same order")
    assert "set_epoch" in violation.cause


def test_a_sequential_sampler_may_repeat_its_order() -> None:
    """shuffle=False promises the same order every epoch."""
    assert (
        CHECK.judge(evidence({0: per_rank(0, shuffle=False), 1: per_rank(0, shuffle=False)})) == []
    )


PROMISING = {rank: loader([sampler(rank, shuffle=False)], ("ShuffledBatches",)) for rank in (0, 1)}
TWELVE = list(range(100, 112))


def test_a_promised_reshuffle_that_repeats_the_order_is_found_by_content() -> None:
    """A component declaring shuffle=True, the same 12 batches in the same order twice."""
    batches = {0: {0: TWELVE, 1: TWELVE[::-1]}, 1: {0: TWELVE, 1: TWELVE[::-1]}}
    (violation,) = CHECK.judge(evidence({0: PROMISING, 1: PROMISING}, batches))
    assert "ShuffledBatches declares shuffle=True" in violation.message


def test_a_reshuffled_epoch_or_too_few_batches_pass() -> None:
    """A new order, or so few batches that a correct shuffle may repeat: no violation."""
    moved = {0: {0: TWELVE, 1: TWELVE}, 1: {0: TWELVE[::-1], 1: TWELVE}}
    assert CHECK.judge(evidence({0: PROMISING, 1: PROMISING}, moved)) == []
    few = {0: {0: TWELVE[:4], 1: TWELVE[:4]}, 1: {0: TWELVE[:4], 1: TWELVE[:4]}}
    assert CHECK.judge(evidence({0: PROMISING, 1: PROMISING}, few)) == []


class Batches(BatchSampler):
    """A batch sampler that declares a reshuffle in set_epoch."""

    shuffle = True

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch


def test_pipeline_facts_read_the_promise_and_what_lightning_replaced() -> None:
    """A batch sampler with set_epoch and shuffle=True is a promise; a weighted sampler
    inside Lightning's DistributedSamplerWrapper is named as replaced, with no promise."""
    from lightning.fabric.utilities.distributed import DistributedSamplerWrapper

    data = TensorDataset(torch.arange(8.0))
    own = pipeline_facts(DataLoader(data, batch_sampler=Batches(SequentialSampler(data), 2, False)))
    assert own["promises"] == ["Batches"]
    weighted = WeightedRandomSampler([1.0] * 8, 8)
    wrapped = DistributedSamplerWrapper(weighted, num_replicas=2, rank=0, shuffle=False)
    facts = pipeline_facts(DataLoader(data, sampler=wrapped))
    assert facts["promises"] == [] and facts["replaced"].startswith("WeightedRandomSampler")


def wrapped(rank: int, asked: int | None, **changes: Any) -> dict[str, Any]:
    """Lightning's DistributedSamplerWrapper around a sampler of the program's own that gave
    the order fingerprinted ``asked`` this epoch."""
    return sampler(rank, **{"class": "DistributedSamplerWrapper", "wraps": True}) | {
        "asked": asked,
        **changes,
    }


def wrapped_epochs(first: int | None, second: int | None, **changes: Any) -> Evidence:
    return evidence(
        {
            epoch: {r: loader([wrapped(r, asked, epoch=epoch, **changes)]) for r in (0, 1)}
            for epoch, asked in ((0, first), (1, second))
        }
    )


def test_a_fixed_order_that_lightnings_wrapper_shuffles_is_found() -> None:
    """The program's sampler gave the same order in two epochs; the wrapper drew a shuffle
    of its positions: the rank did not train on its share of that order."""
    (violation,) = CHECK.judge(wrapped_epochs(7, 7))
    assert (violation.aspect, violation.rank) == ("replaced-order", 0)
    assert violation.message.startswith("in epoch 1 rank 0 draws train loader 0's samples")
    assert "DistributedSamplerWrapper(shuffle=True)" in violation.message


@pytest.mark.parametrize(
    ("first", "second", "changes"),
    [
        pytest.param(7, 8, {}, id="the-programs-order-moves"),  # a random sampler of its own
        pytest.param(7, 7, {"shuffle": False}, id="not-shuffled"),
        pytest.param(None, None, {}, id="order-unread"),
    ],
)
def test_an_order_the_program_does_not_fix_or_the_wrapper_keeps_passes(
    first: int | None, second: int | None, changes: dict[str, Any]
) -> None:
    assert CHECK.judge(wrapped_epochs(first, second, **changes)) == []


def test_pipeline_facts_fingerprint_the_order_the_programs_sampler_gave() -> None:
    from lightning.fabric.utilities.distributed import DistributedSamplerWrapper

    data = TensorDataset(torch.arange(8.0))
    curriculum = [5, 3, 1, 7, 0, 2, 4, 6]
    wrapper = DistributedSamplerWrapper(curriculum, num_replicas=2, rank=0, shuffle=True)
    drawn = list(iter(wrapper))  # the wrapper lists the program's order as an epoch begins
    (facts,) = pipeline_facts(DataLoader(data, sampler=wrapper))["samplers"]
    assert facts["asked"] == hash(tuple(curriculum)) & 0xFFFFFFFFFFFFFFFF
    assert drawn != curriculum[0::2]  # a shuffle of the positions, not the rank's share


BUGS = "examples/bugs/sampler_loses_shuffle.py"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("target", "found"),
    [
        (f"{BUGS}:train_buggy", True),
        (f"{BUGS}:train_fixed", False),
        ("examples/shapes/bucket_batch_sampler.py:train", False),
        ("examples/shapes/weighted_sampler.py:train", False),
        ("examples/shapes/combined_loaders.py:train", False),
        ("examples/shapes/limit_batches.py:train", False),
        ("examples/shapes/iterable_rank_shard.py:train", False),
        ("examples/shapes/max_steps_onecycle.py:train", False),
    ],
)
def test_real_programs(world2: World, target: str, found: bool) -> None:
    """The batch sampler Lightning never tells the epoch is found; correct pipelines pass."""
    outcome = world2.run(target, Schedule(), timeout=60, checks=[DataOrder()])
    assert bool(outcome.violations) == found, outcome.report()
    if found:
        assert "epoch 1 trains on the same 12 batches" in outcome.violations[0].message


@pytest.mark.slow
def test_lightnings_shuffle_of_a_curriculum_is_its_known_issue_and_the_workaround_passes(
    world2: World,
) -> None:
    """examples/known_issues/custom_sampler_order.py: the curriculum Lightning shuffles is
    found with no fault and reported as Lightning's; the rank-aware curriculum is clean."""
    from chaoslight import judge
    from chaoslight.checks import FrameworkFacts

    target = "examples/known_issues/custom_sampler_order.py"
    checks = [DataOrder(), FrameworkFacts()]
    outcome = world2.run(f"{target}:train", Schedule(), timeout=60, checks=checks)
    assert [v.aspect for v in outcome.violations] == ["replaced-order"], outcome.report()
    verdict = judge(outcome)
    assert verdict.known is not None, outcome.report()
    assert verdict.known.issue.key == "lightning-custom-sampler-shuffled"
    fixed = world2.run(f"{target}:train_fixed", Schedule(), timeout=60, checks=checks)
    assert fixed.status == "passed", fixed.report()


# -- what Lightning's rebuilding of a loader kept (``_order_rebuilt``) -------------------


def _rows(n: int = 16) -> TensorDataset:
    return TensorDataset(torch.arange(n, dtype=torch.float32).view(n, 1))


def _made(data: TensorDataset, shuffle: bool, batch_size: int = 1, **loader: Any) -> DataLoader:
    """A loader as Lightning rebuilds one under DDP: a DistributedSampler over the data."""
    sampler = DistributedSampler(data, num_replicas=2, rank=0, shuffle=shuffle)
    return DataLoader(data, batch_size=batch_size, sampler=sampler, **loader)


def _losses(original: DataLoader, made: DataLoader, stage: str = "train") -> list[Any]:
    from chaoslight._checks._order_facts import replacement_facts
    from chaoslight._checks._order_rebuilt import rebuilt_findings

    facts = {"stage": stage, "loaders": [{"rebuilt": replacement_facts(original, made)}]}
    return rebuilt_findings("data-order", [(0, facts)])


def test_a_batch_sampler_rebuilt_with_batches_of_one_is_found() -> None:
    data = _rows()
    original = DataLoader(data, batch_sampler=BatchSampler(SequentialSampler(data), 4, False))
    (found,) = _losses(original, _made(data, shuffle=True))
    assert found.aspect == "rebuilt-batches"
    assert "draws batches of 1 where the program's BatchSampler gives batches of 4" in found.message
    assert "(8 batches a pass on the rank; the program's loader has 4 in all)" in found.message


def test_a_sampler_the_batch_sampler_held_and_lightning_dropped_is_found() -> None:
    data = _rows()
    weighted = WeightedRandomSampler(torch.ones(16), num_samples=16)
    original = DataLoader(data, batch_sampler=BatchSampler(weighted, 4, False))
    found = _losses(original, _made(data, shuffle=True, batch_size=4), stage="val")
    assert [v.aspect for v in found] == ["sampler-dropped"]
    assert "never draws from the program's WeightedRandomSampler" in found[0].message
    assert found[0].message.startswith("Lightning rebuilt validation loader 0")


@pytest.mark.parametrize(("stage", "lost"), [("val", True), ("test", True), ("train", False)])
def test_an_evaluation_loaders_random_order_made_fixed_is_found(stage: str, lost: bool) -> None:
    """A RandomSampler rebuilt as DistributedSampler(shuffle=False): lost for evaluation;
    training loaders are always made shuffling by Lightning, and stay so."""
    data = _rows()
    original = DataLoader(data, batch_size=4, sampler=RandomSampler(data))
    made = _made(data, shuffle=stage != "train" and not lost, batch_size=4)
    found = _losses(original, made, stage=stage)
    assert [v.aspect for v in found] == (["shuffle-lost"] if lost else [])


def test_what_a_correct_rebuilding_keeps_is_not_found() -> None:
    """The same batch size over a DistributedSampler, Lightning's wrapper around the
    program's own sampler, a loader Lightning kept, and a sequential training loader
    Lightning shuffles (as it documents) are all clean."""
    from lightning.fabric.utilities.distributed import DistributedSamplerWrapper

    from chaoslight._checks._order_facts import replacement_facts

    data = _rows()
    plain = DataLoader(data, batch_size=4)
    assert _losses(plain, _made(data, shuffle=True, batch_size=4)) == []
    curriculum = list(reversed(range(16)))
    own = DataLoader(data, batch_size=4, sampler=curriculum)
    wrapper = DistributedSamplerWrapper(own.sampler, num_replicas=2, rank=0, shuffle=False)
    assert _losses(own, DataLoader(data, batch_size=4, sampler=wrapper)) == []
    assert replacement_facts(plain, plain) is None


@pytest.mark.usefixtures("lightning_in_process")
def test_lightnings_own_loader_preparation_goes_through_the_site() -> None:
    """Lightning's data connector tells the observers each loader it readied, and the
    site is gone after the block."""
    from helpers import tiny_loader, tiny_model_class, tiny_trainer
    from lightning.pytorch.trainer.connectors.data_connector import _DataConnector

    import chaoslight

    seen: list[tuple[str | None, bool]] = []
    original = _DataConnector.__dict__["_prepare_dataloader"]

    class Recorder:
        name = "loader-recorder"

        def observer(self) -> Any:
            from chaoslight.checks import observer_class

            def prepared(observer: Any, given: Any, made: Any, stage: str | None) -> None:
                seen.append((stage, made is given))

            return observer_class("Recorder", {"on_loader_prepared": prepared})()

        def judge(self, evidence: Evidence) -> list[Any]:
            return []

    model, loader = tiny_model_class()(), tiny_loader()
    with chaoslight.inject(Schedule(), checks=[Recorder()]):
        tiny_trainer(max_steps=2).fit(model, loader)
    assert seen == [("train", True)]  # one process: the loader is kept as given
    assert _DataConnector.__dict__["_prepare_dataloader"] is original


KNOWN = "examples/known_issues"


@pytest.mark.slow
def test_lightnings_rebuilt_batch_samplers_are_its_known_issue_and_the_workaround_passes(
    world2: World,
) -> None:
    """examples/known_issues/batch_sampler_rebuilt.py: batches of one and a dropped
    weighted sampler, found with no fault in training and validation and reported as
    Lightning's; the rank-aware batch samplers are clean. On 2.5+ the validation
    RandomSampler inside a batch sampler of the program's own keeps its shuffle."""
    from chaoslight import judge
    from chaoslight.checks import FrameworkFacts

    checks = [DataOrder(), FrameworkFacts()]
    target = f"{KNOWN}/batch_sampler_rebuilt.py"
    outcome = world2.run(f"{target}:train", Schedule(), timeout=90, checks=checks)
    found = [(v.aspect, v.message.split(":")[0]) for v in outcome.violations]
    assert found == [
        ("rebuilt-batches", "Lightning rebuilt train loader 0 around a DistributedSampler"),
        (
            "sampler-dropped",
            "Lightning rebuilt train loader 0 around a DistributedSampler(shuffle=True) "
            "over the whole data set",
        ),
        ("rebuilt-batches", "Lightning rebuilt validation loader 0 around a DistributedSampler"),
    ], outcome.report()
    verdict = judge(outcome)
    assert (
        verdict.known is not None and verdict.known.issue.key == "lightning-batch-sampler-rebuilt"
    )
    assert verdict.findings == ()  # every symptom is Lightning's
    for clean in (f"{target}:train_fixed", f"{KNOWN}/eval_batch_sampler_shuffle.py:train"):
        fixed = world2.run(clean, Schedule(), timeout=90, checks=checks)
        assert fixed.status == "passed", fixed.report()


@pytest.mark.slow
def test_a_batch_sampler_loader_built_outside_the_hooks_fails_as_lightnings_known_issue(
    world2: World,
) -> None:
    """Handed to ``trainer.fit`` already built, a loader with a batch sampler is rebuilt
    with no batch size at all and every rank fails in collation at its first batch: the
    failure is Lightning's (#21122), not the program's, with its workaround."""
    from chaoslight import judge
    from chaoslight.checks import FrameworkFacts

    outcome = world2.run(
        "tests/ddp_targets.py:batch_sampler_outside_hooks",
        Schedule(),
        timeout=90,
        checks=[DataOrder(), FrameworkFacts()],
    )
    assert outcome.status == "failed" and "collate" in str(outcome.ranks[0].exception.traceback)
    verdict = judge(outcome)
    assert verdict.known is not None, verdict.reason
    assert verdict.known.issue.key == "lightning-batch-sampler-rebuilt"
    assert verdict.findings == ()  # every symptom is Lightning's


@pytest.mark.slow
def test_a_validation_set_each_rank_builds_for_itself_is_found(world2: World) -> None:
    outcome = world2.run(
        "tests/ddp_targets.py:validation_shard_per_rank",
        Schedule(),
        timeout=60,
        checks=[DataOrder()],
    )
    (found,) = outcome.violations
    assert found.message.startswith(
        "in validation run 0 the ranks' DistributedSamplers of validation loader 0 index "
        "data sets of different lengths (length: rank 0 16, rank 1 12)"
    ), outcome.report()
