"""``restart-equivalence`` for a loop that no Trainer runs (Lightning Fabric, plain
PyTorch): what it records in every rank, and how a restarted job is compared.

A loop resumes itself (``fabric.load``, ``torch.load``), and its steps count from 0
again in every process (``_runtime/_loop_steps.py``): nothing says at which of the job's
steps the restarted run began. What is known: a correct resumable loop trains the job's
steps from its checkpoint's on, to the same end, so a restarted run that trained ``n``
steps resumed at ``N - n`` (``N``: the uninterrupted run's steps). That holds for *every*
correct program only where the job is one deterministic path, so a loop is judged only
where:

- no rank of any run, nor of either fault-free reference, drew a random number while it
  trained (torch's, numpy's and python's global generators, read around each batch, each
  backward and each optimizer step; a loader's iterator may draw its seed when it is made)
  and no dataset holds a generator of its own;
- two fault-free runs recorded the same steps (no clock, no nondeterministic kernel
  decides the path);
- the restarted run resumed past step 0, and at most as far as the runs before it trained.

Then, from the resume on, step by step: each optimizer's learning rates, and the samples
each rank trained on (where a loader without workers fetched them, or the reference shows
content identifies a sample: every distinct row trained equally often, at least twice);
at the end, each optimizer's state names and step counts and the weights it steps
(checksums). The facts, per rank:

- ``lo`` (each optimizer step): the step's learning rates per param group, which
  optimizer (in the order they first stepped), the fingerprints of the batches whose
  backward came before it since the last step (``rows``), whether their loaders' order is
  fixed and whether they had workers;
- ``ld``: once, where the loop first drew a random number while it trained;
- ``lend`` (the injection's end): the optimizers' state names, step counts and weights.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from chaoslight._checks._base import Evidence, observe
from chaoslight._checks._invariants import summaries
from chaoslight._checks._restart_compare import (
    SAMPLES_CAUSE,
    Comparison,
    differs,
    rate_at,
    whole,
)
from chaoslight._checks._restart_facts import (
    RandomWatch,
    optimizer_facts,
    private_generators,
)
from chaoslight._checks._shards import row_hashes

LOOP_CAUSE = (
    "state that is not in the loop's checkpoint: a learning-rate scheduler, the "
    "optimizer's state, a counter the loop keeps in a plain variable"
)
STEP_CAUSE = (
    "a resume that skips steps: a step counter saved ahead of the state it belongs to, or "
    "a checkpoint of one step restored with another's step number"
)


# -- what each rank records ---------------------------------------------------------------
def iterator_order_fixed(iterator: Any) -> bool:
    """A DataLoader iterator's order cannot depend on the random state: a torch
    SequentialSampler or DistributedSampler (a function of seed and epoch), under torch's
    own BatchSampler, over a map-style dataset."""
    from torch.utils.data import BatchSampler, IterableDataset, SequentialSampler
    from torch.utils.data.distributed import DistributedSampler

    if isinstance(getattr(iterator, "_dataset", None), IterableDataset):
        return False
    sampler = getattr(iterator, "_index_sampler", None)
    if isinstance(sampler, BatchSampler):
        if type(sampler) is not BatchSampler:
            return False
        sampler = sampler.sampler
    return type(sampler) in (SequentialSampler, DistributedSampler)


class _Dataset:
    """An iterator's dataset, as ``private_generators`` reads a loader's."""

    def __init__(self, iterator: Any) -> None:
        self.dataset = getattr(iterator, "_dataset", None)


class LoopRecorder:
    """The loop half of the observer: its hooks, called where no Trainer runs."""

    def __init__(self, check: str) -> None:
        self.check = check
        self.watch = RandomWatch()
        self.cache: dict[Any, Any] = {}
        self.pending: tuple[Any, Any] | None = None  # the last batch fetched, its iterator
        self.rows: list[list[int]] = []  # the step's batches, each one's fingerprints
        self.fixed = True
        self.workers = False
        # In the order they first stepped; held until the injection ends, as the end's
        # facts are read then (a target's optimizer is gone once the target returns).
        self.optimizers: list[Any] = []
        self.looked_at: set[int] = set()  # datasets searched for a generator of their own

    def _draws(self, where: str, iterator_made: bool = False, host: bool = False) -> None:
        if self.watch.drew:
            return
        if self.watch.point(where, iterator_made, host):
            observe(self.check, None, {"k": "ld", "at": where})

    def on_loop_batch(self, batch: Any, iterator: Any) -> None:
        made = getattr(iterator, "_num_yielded", 0) <= 1  # its first batch: its seed drawn
        self._draws("a batch's fetch", iterator_made=made, host=self.watch.host is None)
        self.pending = (batch, iterator)

    def on_loop_backward(self, tensors: Any) -> None:
        if self.pending is not None:
            batch, iterator = self.pending
            self.pending = None
            self.rows.append(row_hashes(batch, self.cache))
            self.fixed = self.fixed and iterator_order_fixed(iterator)
            self.workers = self.workers or getattr(iterator, "_num_workers", 0) > 0
            dataset = getattr(iterator, "_dataset", None)
            if id(dataset) not in self.looked_at:
                self.looked_at.add(id(dataset))
                if not self.watch.drew and private_generators(None, [_Dataset(iterator)]):
                    self.watch.drew = "a dataset's own generator"
                    observe(self.check, None, {"k": "ld", "at": self.watch.drew})
        self._draws("a backward")

    def on_loop_before_optimizer_step(self, optimizer: Any) -> None:
        which = self._index(optimizer)
        groups = [float(group.get("lr", 0.0)) for group in optimizer.param_groups]
        facts = {"k": "lo", "o": which, "lr": groups, "rows": self.rows}
        observe(self.check, None, {**facts, "x": self.fixed, "w": self.workers})
        self.rows, self.fixed, self.workers = [], True, False

    def on_loop_after_optimizer_step(self, optimizer: Any) -> None:
        self._draws("an optimizer step")

    def on_loop_end(self) -> None:
        self._draws("the end of training", host=True)
        optimizers, self.optimizers = self.optimizers, []
        facts: dict[str, Any] = {"k": "lend", "opt": [optimizer_facts(o) for o in optimizers]}
        params = [p for o in optimizers for g in o.param_groups for p in g["params"]]
        facts["w"] = summaries(params, bits=True) if params else []
        observe(self.check, None, facts)
        self.cache.clear()
        self.pending = None

    def _index(self, optimizer: Any) -> int:
        for index, known in enumerate(self.optimizers):
            if known is optimizer:
                return index
        self.optimizers.append(optimizer)
        return len(self.optimizers) - 1


def loop_hooks(check: str) -> dict[str, Any]:
    """The observer's loop hooks, one recorder per observer (per rank and run)."""
    recorder = LoopRecorder(check)

    def hook(name: str) -> Any:
        method = getattr(recorder, name)
        return lambda self, *args: method(*args)

    names = (
        "on_loop_batch",
        "on_loop_backward",
        "on_loop_before_optimizer_step",
        "on_loop_after_optimizer_step",
        "on_loop_end",
    )
    return {name: hook(name) for name in names}


# -- how a run is read back ---------------------------------------------------------------
@dataclass
class LoopSeen:
    """One run of a loop, every rank: its optimizer steps in order, per rank."""

    steps: dict[int, list[tuple[int, dict[str, Any]]]] = field(default_factory=dict)
    drew: dict[int, str] = field(default_factory=dict)
    end: dict[int, dict[str, Any]] = field(default_factory=dict)

    def count(self, rank: int) -> int:
        """The loop steps the rank trained (the last step's number, plus one)."""
        return max((step for step, _ in self.steps.get(rank, [])), default=-1) + 1

    def at(self, rank: int, step: int) -> list[dict[str, Any]]:
        return [facts for s, facts in self.steps.get(rank, []) if s == step]

    def path(self) -> Any:
        """What two fault-free runs of a deterministic program record alike."""
        return (
            {r: [(s, f["o"], f["lr"], f["rows"]) for s, f in v] for r, v in self.steps.items()},
            {r: e["w"] for r, e in self.end.items()},
        )


def loop_of(evidence: Evidence, check: str) -> LoopSeen:
    seen = LoopSeen()
    for event, facts in evidence.observations(check):
        kind = facts.get("k")
        if kind == "lo" and event.step is not None:
            seen.steps.setdefault(event.rank, []).append((int(event.step), facts))
        elif kind == "ld":
            seen.drew.setdefault(event.rank, str(facts.get("at", "")))
        elif kind == "lend":
            seen.end[event.rank] = facts
    return seen


def is_loop(evidence: Evidence, check: str) -> bool:
    return any(facts.get("k") == "lo" for _, facts in evidence.observations(check))


# -- the comparison -------------------------------------------------------------------
def compare_loops(name: str, references: list[LoopSeen], runs: list[LoopSeen]) -> Comparison | None:
    """The last of ``runs`` (a restarted job's runs, in order) against the fault-free
    ``references`` (two); None where the module docstring's conditions do not hold."""
    if len(references) < 2 or references[0].path() != references[1].path():
        return None
    if any(seen.drew for seen in (*references, *runs)):
        return None
    reference, last = references[0], runs[-1]
    ranks = sorted(reference.steps)
    if not ranks or sorted(last.steps) != ranks:
        return None
    resumed = {reference.count(rank) - last.count(rank) for rank in ranks}
    if len(resumed) != 1:
        return None
    start = resumed.pop()
    if start <= 0:
        return None  # trained from step 0 again (no checkpoint), or longer: not a resume
    result = Comparison(name)
    trained = sum(max((run.count(rank) for rank in ranks), default=0) for run in runs[:-1])
    if start > trained:
        message = (
            f"the restarted run trained {last.count(ranks[0])} steps, so it resumed at step "
            f"{start}, but the runs before it trained {trained}: steps were never trained"
        )
        result.fail(trained, message, None, STEP_CAUSE, aspect="position")
        return result
    identifies = _content_identifies(reference)
    aligned = [
        (
            (rank, start + mine_step, mine_step),
            last.at(rank, mine_step),
            reference.at(rank, start + mine_step),
        )
        for rank in ranks
        for mine_step in range(last.count(rank))
    ]
    if any(_diverged(mine, theirs, identifies) for _, mine, theirs in aligned):
        return None  # another order the random state chose: one path no more
    failed: set[int] = set()
    for where, mine, theirs in aligned:
        if where[0] not in failed and _step(result, where, mine, theirs, identifies):
            failed.add(where[0])
    for rank in ranks:
        if rank in last.end and rank in reference.end:
            _end(result, rank, reference.count(rank) - 1, last.end[rank], reference.end[rank])
    return result


def _content_identifies(reference: LoopSeen) -> bool:
    """Every distinct row the reference trained on (all ranks) came as often as every
    other, at least twice: a row's content names its sample (no random augmentation)."""
    counts = Counter(
        row
        for steps in reference.steps.values()
        for _, facts in steps
        for rows in facts["rows"]
        for row in rows
    )
    return bool(counts) and len(set(counts.values())) == 1 and min(counts.values()) >= 2


def _comparable(a: dict[str, Any], b: dict[str, Any], identifies: bool) -> bool:
    """Whether two steps' samples must be the same: fixed orders, and content that names
    a sample (no loader worker that may augment with a seed the restart changed)."""
    return bool(a["x"] and b["x"] and (identifies or not (a["w"] or b["w"])))


def _diverged(mine: list[dict[str, Any]], theirs: list[dict[str, Any]], identifies: bool) -> bool:
    """The step trained on other samples than the reference's where a correct program may
    (an order or an augmentation the random state decides, drawn where an iterator is
    made): from there on the two runs are not one path, and nothing is judged."""
    return any(
        a["rows"] != b["rows"] and not _comparable(a, b, identifies)
        for a, b in zip(mine, theirs, strict=False)
    )


def _step(
    result: Comparison,
    where: tuple[int, int, int],
    mine: list[dict[str, Any]],
    theirs: list[dict[str, Any]],
    identifies: bool,
) -> bool:
    """One step of one rank against the reference's; True once something differed."""
    rank, step, mine_step = where
    ran = f" (the restarted run's step {mine_step})"
    if len(mine) != len(theirs):
        message = differs(f"optimizer steps in step {step}{ran}", len(mine), len(theirs))
        result.fail(step, message, rank, STEP_CAUSE, aspect="position")
        return True
    for a, b in zip(mine, theirs, strict=True):
        if a["lr"] != b["lr"]:
            group = _first_difference(a["lr"], b["lr"])
            optimizer = f" of optimizer {a['o']}" if a["o"] else ""
            what = f"learning rate of group {group}{optimizer} at step {step}{ran}"
            values = differs(what, rate_at(a["lr"], group), rate_at(b["lr"], group))
            result.fail(step, values, rank, LOOP_CAUSE, aspect="learning-rate")
            return True
        if a["rows"] != b["rows"]:
            message = (
                f"rank {rank} trained on other samples at step {step}{ran} than an "
                "uninterrupted run: the resume did not restore the data's position"
            )
            result.fail(step, message, rank, SAMPLES_CAUSE, aspect="samples")
            return True
    return False


def _end(
    result: Comparison, rank: int, step: int, mine: dict[str, Any], theirs: dict[str, Any]
) -> None:
    """The optimizers' state and the weights they step, at the end of the job."""
    if len(mine["opt"]) != len(theirs["opt"]):
        message = differs("optimizers", len(mine["opt"]), len(theirs["opt"]))
        result.fail(step, message, rank, LOOP_CAUSE, aspect="optimizer")
        return
    for which, (a, b) in enumerate(zip(mine["opt"], theirs["opt"], strict=True)):
        if a["keys"] != b["keys"]:
            what = f"optimizer {which} state"
            message = differs(what, a["keys"], b["keys"])
            result.fail(step, message, rank, LOOP_CAUSE, aspect="optimizer")
            return
        x, y = max(a["steps"].values(), default=0), max(b["steps"].values(), default=0)
        if x != y:
            what = f"optimizer {which} step count at the end"
            message = differs(what, whole(x), whole(y))
            result.fail(step, message, rank, LOOP_CAUSE, aspect="optimizer")
            return
    if mine["w"] != theirs["w"] and result.weights is None and not result.failures:
        message = (
            "the weights the optimizers step end differently than in an uninterrupted run "
            f"(parameter {_first_difference(mine['w'], theirs['w'])} of the optimizers' "
            "param groups), and the program draws no random number"
        )
        result.fail(step, message, rank, LOOP_CAUSE, aspect="weights")


def _first_difference(mine: list[Any], theirs: list[Any]) -> int:
    """The first index where two lists differ (0 when their lengths do)."""
    if len(mine) != len(theirs):
        return 0
    return next((i for i, (a, b) in enumerate(zip(mine, theirs, strict=True)) if a != b), 0)
