"""The data-order check: each epoch draws what the program's own data pipeline promises.

``disjoint-shards`` checks that no two ranks share a sample; this checks coverage and
order, from what the pipeline itself says it does:

- **Coverage.** A ``DistributedSampler`` covers its data set once per epoch across the
  ranks (up to its documented padding, or ``drop_last``) only when every rank's sampler
  permutes the same data the same way: the same length, ``shuffle``, ``seed`` and epoch.
  Where they disagree (a seed per rank, a data set built per rank, ``set_epoch`` called on
  some ranks only) the union of the ranks' shares is recomputed here, with the sampler's
  own arithmetic, and the first index that no rank drew is named.
- **Reshuffling.** A ``DistributedSampler(shuffle=True)`` draws the same permutation in
  two epochs exactly when its epoch was not advanced between them (``set_epoch``: Lightning
  calls it on ``loader.sampler`` and ``loader.batch_sampler.sampler`` only). A sampler,
  batch sampler or data set of the program's own that declares ``shuffle = True`` and
  reshuffles in ``set_epoch`` is judged by content: the same batches in the same order in
  two epochs on every rank, with at least ``MIN_DISTINCT_BATCHES`` distinct batches (so a
  correct shuffle repeats an order by chance with probability below 1/10!), is a broken
  promise. Random augmentation changes content each epoch: then nothing is found, never
  a false alarm.

Nothing else is judged: a sampler that promises no reshuffle (``shuffle=False``, a
``WeightedRandomSampler``, whose repetitions are what it promises), an epoch a fault or
``max_steps`` cut short (its batches are fewer), an ``IterableDataset`` without a shuffle
attribute. Where Lightning replaced the program's sampler (``DistributedSamplerWrapper``
around it) the report says so.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any

from chaoslight._checks._base import Check, Evidence, Violation, observe, observer_class
from chaoslight._checks._order_facts import distributed_indices
from chaoslight._checks._order_loops import loop_hooks
from chaoslight._checks._order_rebuilt import (
    PREPARED,
    STAGE_WORDS,
    EvaluationRuns,
    RebuiltLoaders,
    rebuilt_findings,
)
from chaoslight._checks._reruns import faults_leave_training_alone
from chaoslight._checks._shards import _tensors, data_altered, row_hashes, train_loaders

# The aspect of a violation that is the framework's replacement of the program's order
# (the known issue ``lightning-custom-sampler-shuffled`` claims exactly these).
REPLACED_ORDER = "replaced-order"
MIN_DISTINCT_BATCHES = 10  # 10! > 3.6e6: a correct shuffle repeats an order by chance
# The DistributedSampler's state that decides its permutation, and must agree across ranks.
AGREED = ("length", "shuffle", "seed", "epoch", "drop_last", "replicas")


def batch_fingerprint(batch: Any) -> int:
    """One 64-bit fingerprint of a whole batch (every tensor, every row, in order)."""
    value = 0
    for tensor in _tensors(batch):
        rows = row_hashes(tensor) if tensor.dim() > 0 else row_hashes(tensor.reshape(1))
        value = hash((value, tuple(rows)))
    return value & 0xFFFFFFFFFFFFFFFF


class DataOrder(Check):
    """Each epoch draws what the program's data pipeline promises: every sample once
    across the ranks, and a new order where it promises to reshuffle."""

    name = "data-order"
    coverage_cause = (
        "DistributedSamplers that permute differently on different ranks (a seed per rank, "
        "a data set built in a rank-dependent order or length, set_epoch on some ranks "
        "only): give every rank the same data set and seed"
    )
    order_cause = (
        "a sampler of the program's own under DDP with use_distributed_sampler=True: "
        "Lightning wraps it in DistributedSamplerWrapper(shuffle=True) for training, "
        "which shuffles the order the sampler gives"
    )
    epoch_cause = (
        "a shuffling sampler whose set_epoch is never called: Lightning calls set_epoch "
        "only on loader.sampler and loader.batch_sampler.sampler, never on a batch sampler "
        "itself, a sampler held under another attribute, or a data set. Call it from "
        "on_train_epoch_start, or derive the epoch from the inner sampler"
    )
    loop_epoch_cause = (
        "a loop that never calls sampler.set_epoch(epoch) before an epoch's iterator is made: "
        "a DistributedSampler(shuffle=True) draws its permutation from seed + epoch, and "
        "torch does not advance the epoch (Fabric's setup_dataloaders loaders do, each time "
        "they are iterated)"
    )

    def observer(self) -> Any:
        check = self
        state: dict[str, Any] = {"fit": -1, "first": False, "hash": False, "batches": []}
        rebuilt = RebuiltLoaders(check.name)
        evaluation = EvaluationRuns(check.name, rebuilt)

        def on_fit_start(self: Any, trainer: Any, module: Any) -> None:
            state["fit"] += 1

        def on_train_epoch_start(self: Any, trainer: Any, module: Any) -> None:
            state["first"], state["hash"], state["batches"] = True, False, []

        def on_train_batch_start(self: Any, trainer: Any, module: Any, batch: Any, *a: Any) -> None:
            if state["first"]:
                # The loaders' iterators exist now: a sampler's state is this epoch's.
                state["first"] = False
                loaders = rebuilt.facts(train_loaders(trainer))
                state["hash"] = any(facts["promises"] for facts in loaders)
                facts = {"fit": state["fit"], "epoch": trainer.current_epoch, "loaders": loaders}
                observe(check.name, trainer, facts | {"world_size": trainer.world_size})
            if state["hash"]:
                state["batches"].append(batch_fingerprint(batch))

        def on_train_epoch_end(self: Any, trainer: Any, module: Any) -> None:
            if state["hash"]:
                facts = {"fit": state["fit"], "epoch": trainer.current_epoch}
                observe(check.name, trainer, facts | {"batches": state["batches"]})
            state["hash"], state["batches"] = False, []

        hooks = {
            "on_fit_start": on_fit_start,
            "on_train_epoch_start": on_train_epoch_start,
            "on_train_batch_start": on_train_batch_start,
            "on_train_epoch_end": on_train_epoch_end,
            "on_loader_prepared": lambda self, *args: rebuilt.prepared(*args),
            **evaluation.hooks(),  # validation, test and predict runs
            **loop_hooks(check.name),  # a loop no Trainer runs (``_order_loops``)
        }
        return observer_class("DataOrderObserver", hooks)()

    def judge(self, evidence: Evidence) -> list[Violation]:
        pipelines: dict[int, dict[int, dict[int, Any]]] = defaultdict(lambda: defaultdict(dict))
        batches: dict[int, dict[int, dict[int, list[int]]]] = defaultdict(lambda: defaultdict(dict))
        runs: dict[tuple[str, int], dict[int, Any]] = defaultdict(dict)
        firsts: list[tuple[int, dict[str, Any]]] = []  # what each rank's loaders were made of
        for event, facts in evidence.observations(self.name):
            if PREPARED in facts:  # a loader as Lightning readied it: read by known issues
                continue
            if "stage" in facts:  # a validation, test or predict run
                runs[(facts["stage"], int(facts["run"]))].setdefault(event.rank, facts)
                firsts.append((event.rank, facts))
                continue
            fit, epoch = int(facts["fit"]), int(facts["epoch"])
            if "loaders" in facts:
                pipelines[fit][epoch].setdefault(event.rank, facts)
                firsts.append((event.rank, facts))
            else:
                batches[fit][epoch].setdefault(event.rank, list(facts["batches"]))
        if data_altered(evidence):
            batches.clear()  # a fault repeated or lost a batch: the streams are its doing
        if not faults_leave_training_alone(evidence):
            # A loop's passes are its own iterators: one that caught an injected error may
            # iterate an epoch again, and its passes then pair with no peer's.
            for fit in [f for f, epochs in pipelines.items() if _of_a_loop(epochs)]:
                del pipelines[fit]
        found: list[Violation | None] = []
        for fit in sorted(set(pipelines) | set(batches)):
            # Lightning's replacement of the program's order is reported beside, never
            # instead of, what the program's own pipeline did (a known issue claims it).
            found = [self._fit(pipelines[fit], batches[fit]), self._order_replaced(pipelines[fit])]
            if any(found):
                break
        # The evaluation loaders' coverage (their order is Lightning's to choose), then
        # what Lightning's rebuilding of any loader lost (known issues claim those).
        holes = (self._coverage(run, runs[(stage, run)]) for stage, run in sorted(runs))
        found.append(next(filter(None, holes), None))
        found += rebuilt_findings(self.name, firsts)
        return [v for v in found if v is not None]

    def _fit(
        self, pipelines: dict[int, dict[int, Any]], batches: dict[int, dict[int, list[int]]]
    ) -> Violation | None:
        epochs = sorted(pipelines)
        for index, epoch in enumerate(epochs):
            found = self._coverage(epoch, pipelines[epoch])
            if found is None and index:
                previous = epochs[index - 1]
                found = self._reshuffled(previous, epoch, pipelines[previous], pipelines[epoch])
                if found is None and previous in batches and epoch in batches:
                    found = self._by_content(previous, epoch, pipelines[epoch], batches)
            if found is not None:
                return found
        return None

    def _order_replaced(self, pipelines: dict[int, dict[int, Any]]) -> Violation | None:
        """A sampler of the program's own that gave the same order in two epochs, which
        Lightning's ``DistributedSamplerWrapper(shuffle=True)`` drew in another: each rank
        trained on a shuffle of the order the program asked for, not on its share of it."""
        epochs = sorted(pipelines)
        for previous, epoch in itertools.pairwise(epochs):
            for rank in sorted(set(pipelines[previous]) & set(pipelines[epoch])):
                before = sampler_list(pipelines[previous][rank])
                now = sampler_list(pipelines[epoch][rank])
                for (index, old), (_, new) in zip(before, now, strict=False):
                    if not (new["wraps"] and new["known"] and new["shuffle"]):
                        continue
                    if new["asked"] is None or old.get("asked") != new["asked"]:
                        continue  # the program's own order moves: nothing fixed was asked
                    drawn = distributed_indices(new)
                    share = distributed_indices(new | {"shuffle": False})
                    if drawn == share:
                        continue
                    message = (
                        f"in epoch {epoch} rank {rank} draws train loader {index}'s samples "
                        f"in another order than the program's sampler gives (the same order "
                        f"in epochs {previous} and {epoch}): Lightning replaced it with "
                        f"{new['class']}(shuffle=True), which draws positions {drawn[:4]}… "
                        f"of that order where the rank's share is positions {share[:4]}…"
                        + replaced({rank: pipelines[epoch][rank]}, index)
                    )
                    return Violation(
                        self.name, message, rank=rank, cause=self.order_cause, aspect=REPLACED_ORDER
                    )
        return None

    def _coverage(self, epoch: int, ranks: dict[int, Any]) -> Violation | None:
        """The first index no rank drew, where the ranks' DistributedSamplers disagree."""
        for index, parts in enumerate(aligned(ranks)):
            differ = [key for key in AGREED if len({repr(p[key]) for p in parts.values()}) > 1]
            if not differ or not all(p["known"] for p in parts.values()):
                continue
            detail = "; ".join(
                f"{key}: " + ", ".join(f"rank {r} {p[key]}" for r, p in sorted(parts.items()))
                for key in differ
            )
            lengths = {p["length"] for p in parts.values()}
            facts = next(iter(ranks.values()))
            name, epochs = loader_name(facts, index), period(facts)
            if len(lengths) > 1:
                message = (
                    f"in {epochs} {epoch} the ranks' DistributedSamplers of {name} index "
                    f"data sets of different lengths ({detail}): an index names a different "
                    "sample on each rank, so some samples are drawn twice and others never"
                )
                return Violation(self.name, message, cause=self.coverage_cause)
            drawn = set().union(*(distributed_indices(p) for p in parts.values()))
            missing = sorted(set(range(lengths.pop())) - drawn)
            if missing:
                what = "position" if any(p["wraps"] for p in parts.values()) else "sample"
                message = (
                    f"in {epochs} {epoch} {what} {missing[0]} (and {len(missing) - 1} more) of "
                    f"{name} was drawn by no rank: the ranks' "
                    f"DistributedSamplers disagree ({detail})" + replaced(ranks, index)
                )
                return Violation(self.name, message, cause=self.coverage_cause)
        return None

    def _reshuffled(
        self, previous: int, epoch: int, before: dict[int, Any], now: dict[int, Any]
    ) -> Violation | None:
        """A DistributedSampler(shuffle=True) whose state did not move between epochs."""
        for rank in sorted(set(before) & set(now)):
            pairs = zip(sampler_list(before[rank]), sampler_list(now[rank]), strict=False)
            for (index, old), (_, new) in pairs:
                if not (new["shuffle"] and new["known"]) or new["wraps"]:
                    continue
                if any(old[key] != new[key] for key in AGREED) or old["rank"] != new["rank"]:
                    continue
                first = distributed_indices(new)[:1]
                key = now[rank].get("loop")
                epochs = "pass" if key else "epoch"
                message = (
                    f"{epochs} {epoch} draws the same samples in the same order as {epochs} "
                    f"{previous} on rank {rank} (first sample index {first[0] if first else '-'}"
                    f"): {loader_name(now[rank], index)}'s DistributedSampler(shuffle=True) "
                    f"stayed at epoch {new['epoch']}" + replaced({rank: now[rank]}, index)
                )
                cause = self.loop_epoch_cause if key else self.epoch_cause
                return Violation(self.name, message, rank=rank, cause=cause)
        return None

    def _by_content(
        self,
        previous: int,
        epoch: int,
        now: dict[int, Any],
        batches: dict[int, dict[int, list[int]]],
    ) -> Violation | None:
        """Every rank's batches identical, in order, in two epochs, where a component of
        the program's own promised to reshuffle: enough distinct batches that a correct
        shuffle would not repeat the order by chance."""
        ranks = sorted(now)
        if not ranks or any(r not in batches[previous] or r not in batches[epoch] for r in ranks):
            return None
        streams = {rank: (batches[previous][rank], batches[epoch][rank]) for rank in ranks}
        if any(old != new for old, new in streams.values()):
            return None
        if max(len(set(old)) for old, _ in streams.values()) < MIN_DISTINCT_BATCHES:
            return None
        promises = sorted(
            {p for facts in now.values() for f in facts["loaders"] for p in f["promises"]}
        )
        count = len(streams[ranks[0]][0])
        message = (
            f"epoch {epoch} trains on the same {count} batches in the same order as epoch "
            f"{previous} on every rank (first batch {streams[ranks[0]][0][0]:016x}), though "
            f"{', '.join(promises)} declares shuffle=True and reshuffles in set_epoch"
        )
        return Violation(self.name, message, rank=ranks[0], cause=self.epoch_cause)


def aligned(ranks: dict[int, Any]) -> list[dict[int, dict[str, Any]]]:
    """Per DistributedSampler (by position), each rank's state: only where every rank has
    the same pipeline shape and each takes its own part of the world (disjoint-shards
    judges the parts)."""
    lists = {rank: sampler_list(facts) for rank, facts in ranks.items()}
    if len(ranks) < 2 or len({len(found) for found in lists.values()}) != 1:
        return []
    world = int(next(iter(ranks.values()))["world_size"])
    result = []
    for position in range(len(next(iter(lists.values())))):
        parts = {rank: found[position][1] for rank, found in lists.items()}
        taken = sorted(p["rank"] for p in parts.values())
        whole = all(p["replicas"] == world for p in parts.values())
        if len(parts) == world and taken == list(range(world)) and whole:
            result.append(parts)
    return result


def sampler_list(facts: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """(train loader index, DistributedSampler state) for every loader's samplers."""
    return [(i, s) for i, loader in enumerate(facts["loaders"]) for s in loader["samplers"]]


def _of_a_loop(epochs: dict[int, dict[int, Any]]) -> bool:
    return any(facts.get("loop") for ranks in epochs.values() for facts in ranks.values())


def loader_name(facts: dict[str, Any], index: int) -> str:
    """A Trainer's loader by its stage and index; a loop's by its data set
    (``_order_loops``)."""
    key = facts.get("loop")
    stage = STAGE_WORDS.get(facts.get("stage", "train"), "train")
    return f"the loop's loader over {key}" if key else f"{stage} loader {index}"


def period(facts: dict[str, Any]) -> str:
    """What one draw of a loader's samples is called: a loop's pass, a training epoch,
    an evaluation stage's run."""
    if facts.get("loop"):
        return "pass"
    stage = facts.get("stage")
    return f"{STAGE_WORDS[stage]} run" if stage in STAGE_WORDS else "epoch"


def replaced(ranks: dict[int, Any], index: int) -> str:
    """Where Lightning replaced the program's sampler: say so."""
    for facts in ranks.values():
        loaders = facts["loaders"]
        if index < len(loaders) and loaders[index].get("replaced"):
            return f"; Lightning replaced the program's sampler: {loaders[index]['replaced']}"
    return ""
