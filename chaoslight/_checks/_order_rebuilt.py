"""``data-order`` beyond the training loader: the validation, test and predict loaders'
coverage, and what Lightning's rebuilding of a loader under DDP kept of what the program
asked for.

Under DDP with ``use_distributed_sampler=True`` Lightning rebuilds each loader the program
gives around a DistributedSampler (``_DataConnector._prepare_dataloader``). The site there
tells the observer which loader the program gave and which one the stage draws from
(``on_loader_prepared``), so a judge compares, per loader, what the program asked for with
what every rank got:

- **the batch size**: the made loader's batches against the program's (a loader given a
  torch ``BatchSampler`` is rebuilt with batches of one: ``rebuilt-batches``);
- **the program's own sampler** (a curriculum, a weighted or bucketing sampler, anything
  but torch's Random-, Sequential- or DistributedSampler): drawn from, through Lightning's
  wrapper, or dropped for a DistributedSampler over the whole data set
  (``sampler-dropped``);
- **a random order in evaluation**: a validation, test or predict loader whose sampler is
  a ``RandomSampler`` rebuilt around a DistributedSampler(shuffle=False), so every run
  draws the same order (``shuffle-lost``).

Each is Lightning's doing, never the program's: the known issues of ``_verdict`` claim
these aspects, and the report says what to write instead. A training loader whose
sequential order Lightning shuffles is what Lightning documents (``shuffle=True`` for
training), and is not reported. Only a loader a stage drew a batch from is judged.
"""

from __future__ import annotations

import json
import weakref
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from chaoslight._checks._base import Violation, observe
from chaoslight._checks._order_facts import guarded_facts, replacement_facts
from chaoslight._checks._shards import stage_loaders
from chaoslight._runtime._events import Event
from chaoslight._runtime._evidence import OBSERVATION

REBUILT_BATCHES = "rebuilt-batches"
# An observation of a loader rebuilt with another batch size, made when Lightning readies it.
PREPARED = "prepared"
SAMPLER_DROPPED = "sampler-dropped"
SHUFFLE_LOST = "shuffle-lost"
# A stage's loaders, as a report names them (Lightning's stage prefixes).
STAGE_WORDS = {"train": "train", "val": "validation", "test": "test", "predict": "predict"}
REBUILT_CAUSE = (
    "Lightning's rebuilding of the program's loader under DDP (use_distributed_sampler="
    "True): it keeps neither a torch BatchSampler's batch size nor a sampler held by a "
    "batch sampler. Give the loader batch_size= and sampler=/shuffle= instead of a batch "
    "sampler, or set Trainer(use_distributed_sampler=False) and build the batch sampler "
    "over a DistributedSampler (or DistributedSamplerWrapper(your_sampler)) yourself"
)
SHUFFLE_CAUSE = (
    "Lightning's rebuilding of an evaluation loader under DDP: it reads the shuffle from "
    "loader.sampler, which is a SequentialSampler when the program gave a batch sampler, "
    "so the RandomSampler inside the batch sampler is replaced by a DistributedSampler("
    "shuffle=False)"
)


class RebuiltLoaders:
    """The observer's record of the loaders Lightning rebuilt: what each asked for and
    what each gives, found again by the made loader (weakly, so a loader is never kept
    alive by a check)."""

    def __init__(self, check: str) -> None:
        self.check = check
        self._made: dict[int, tuple[Any, dict[str, Any]]] = {}

    def prepared(self, original: Any, prepared: Any, stage: str | None) -> None:
        facts = replacement_facts(original, prepared)
        if facts is None:
            return
        if batch_lost(facts):
            # Said at once: a loader rebuilt with no batch size at all fails in collation
            # at its first batch, before any hook that reads the loaders runs (a known
            # issue's signature reads it: ``_verdict/_known_silent``).
            observe(self.check, None, {PREPARED: stage or "", "rebuilt": facts})
        try:
            self._made[id(prepared)] = (weakref.ref(prepared), facts)
        except TypeError:  # a loader that takes no weak reference: not judged
            return

    def of(self, loader: Any) -> dict[str, Any] | None:
        entry = self._made.get(id(loader))
        return entry[1] if entry is not None and entry[0]() is loader else None

    def facts(self, loaders: list[Any]) -> list[dict[str, Any]]:
        """Each loader's pipeline facts, with what Lightning's rebuilding of it kept."""
        return [guarded_facts(loader) | {"rebuilt": self.of(loader)} for loader in loaders]


class EvaluationRuns:
    """The observer's hooks for validation, test and predict: at each run's first batch,
    the stage's loaders as ``data-order`` judges a training epoch's."""

    def __init__(self, check: str, rebuilt: RebuiltLoaders) -> None:
        self.check, self.rebuilt = check, rebuilt
        self.runs: dict[str, int] = defaultdict(lambda: -1)
        self.waiting: set[str] = set()

    def started(self, stage: str) -> None:
        self.runs[stage] += 1
        self.waiting.add(stage)

    def batch(self, stage: str, trainer: Any) -> None:
        if stage not in self.waiting:
            return
        self.waiting.discard(stage)
        loaders = self.rebuilt.facts(stage_loaders(trainer, stage))
        facts = {"stage": stage, "run": self.runs[stage], "loaders": loaders}
        observe(self.check, trainer, facts | {"world_size": trainer.world_size})

    def hooks(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for stage, hook in (("val", "validation"), ("test", "test"), ("predict", "predict")):
            found[f"on_{hook}_epoch_start"] = self._start(stage)
            found[f"on_{hook}_batch_start"] = self._batch(stage)
        return found

    def _start(self, stage: str) -> Any:
        return lambda observer, trainer, module: self.started(stage)

    def _batch(self, stage: str) -> Any:
        return lambda observer, trainer, module, *args, **kwargs: self.batch(stage, trainer)


def rebuilt_findings(check: str, observed: list[tuple[int, dict[str, Any]]]) -> list[Violation]:
    """What Lightning's rebuilding lost of each loader a stage drew from: one violation
    per stage, loader and aspect, on the lowest rank that drew from it."""
    found: dict[tuple[str, int, str], Violation] = {}
    for rank, facts in sorted(observed, key=lambda pair: pair[0]):
        stage = str(facts.get("stage", "train"))
        if stage not in STAGE_WORDS:
            continue
        for index, loader in enumerate(facts["loaders"]):
            made = loader.get("rebuilt")
            if not made:
                continue
            for aspect, message, cause in _losses(stage, index, rank, made):
                found.setdefault(
                    (stage, index, aspect),
                    Violation(check, message, rank=rank, cause=cause, aspect=aspect),
                )
    order = list(STAGE_WORDS)
    return [found[key] for key in sorted(found, key=lambda k: (order.index(k[0]), k[1]))]


def batch_lost(made: dict[str, Any]) -> bool:
    """Whether Lightning's rebuilt loader draws batches of another size than the program's
    batch sampler (of one, or with no batch size at all: no collation into batches)."""
    asked = made.get("asked_batch")
    return isinstance(asked, int) and asked > 1 and made.get("made_batch") != asked


def lost_batches_on(events: Iterable[Event], check: str) -> frozenset[int]:
    """The ranks on which Lightning readied a loader rebuilt with another batch size."""
    ranks = set()
    for event in events:
        if event.kind != OBSERVATION or event.site != check or PREPARED not in event.detail:
            continue
        facts = json.loads(event.detail)
        if PREPARED in facts and batch_lost(facts.get("rebuilt") or {}):
            ranks.add(event.rank)
    return frozenset(ranks)


def _losses(stage: str, index: int, rank: int, made: dict[str, Any]) -> list[tuple[str, str, str]]:
    name = f"{STAGE_WORDS.get(stage, stage)} loader {index}"
    around = f"Lightning rebuilt {name} around a {made['made_sampler']}"
    losses = []
    asked, got = made["asked_batch"], made["made_batch"]
    if isinstance(asked, int) and isinstance(got, int) and asked != got:
        message = (
            f"{around}: rank {rank} draws batches of {got} where the program's "
            f"{made['asked_batch_sampler']} gives batches of {asked} ({made['made_batches']} "
            f"batches a pass on the rank; the program's loader has {made['asked_batches']} "
            "in all)"
        )
        losses.append((REBUILT_BATCHES, message, REBUILT_CAUSE))
    if made["made_keeps"] or made["made_kind"] != "distributed":
        return losses
    if made["asked_kind"] == "own":
        message = (
            f"{around}(shuffle={made['made_shuffle']}) over the whole data set: rank {rank} "
            f"never draws from the program's {made['asked_sampler']} (held by its "
            f"{made['asked_batch_sampler']}), whose order and weighting are lost"
        )
        losses.append((SAMPLER_DROPPED, message, REBUILT_CAUSE))
    elif made["asked_kind"] == "random" and stage != "train" and not made["made_shuffle"]:
        message = (
            f"the program's {name} draws a new order each run ({made['asked_batch_sampler']} "
            f"over a {made['asked_sampler']}); {around}(shuffle=False): rank {rank} draws "
            "its share in the same order every run"
        )
        losses.append((SHUFFLE_LOST, message, SHUFFLE_CAUSE))
    return losses
