"""How ``restart-equivalence`` reads a run back (``fits_of``: its fits, rank by rank) and
compares a restarted job with an uninterrupted fault-free run, step by step.

Only what a correct program keeps identical *whatever the random state* is judged
(Lightning checkpoints no random state, so after a restart dropout masks, shuffles and
metrics differ), from the step the resumed fit began at:

- the learning rate of every param group at every optimizer step (unless a plateau
  scheduler or a monitoring callback may drive it from metrics, in a fit that draws
  random numbers);
- the samples of each step on each rank, by content, where the reference shows that
  content identifies a sample (each complete epoch holds the same samples) and the
  loaders' order is fixed (a Sequential or Distributed sampler); with an order the random
  state decides, each complete epoch's samples across ranks; a mid-epoch resume of a
  loader Lightning cannot resume there is a warning in Lightning's words;
- at the end of the job: global step and epoch (unless a callback stopped the fit in a
  run that draws random numbers, or a ``Timer`` did), the fit loop's counters, the
  optimizers' state names and step counts, the callbacks' counters;
- where every run drew no random number and trained on the same samples (the same path),
  everything at the end exactly: callback states, every parameter's step count, and
  the weights (the caller confirms the weights with a second reference).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from chaoslight._checks._base import Evidence, Violation
from chaoslight._checks._reruns import LIGHTNING_MID_EPOCH

CAUSE = (
    "state that is not in the checkpoint: a callback without state_dict, a counter in a "
    "plain attribute, a scheduler not returned from configure_optimizers"
)
POSITION_CAUSE = (
    "a checkpoint written after Lightning counted a cut-short epoch as finished (saved in "
    "on_train_end after trainer.should_stop: the resume starts the next epoch), or a data "
    "position that is not restored"
)
SAMPLES_CAUSE = (
    "a data position that is not restored: a sampler whose epoch is not set after the "
    "resume, a loader state kept outside the checkpoint"
)
# Lightning's own callbacks whose monitor drives no learning rate.
MONITORS_WITHOUT_RATES = frozenset({"ModelCheckpoint", "EarlyStopping"})


Key = tuple[int, int]  # (epoch, batch index) of a fit


@dataclass
class FitSeen:
    """One fit of one run, every rank: what the observer recorded."""

    start: dict[int, dict[str, Any]] = field(default_factory=dict)
    batches: dict[int, dict[Key, dict[str, Any]]] = field(default_factory=dict)
    rates: dict[int, dict[tuple[int, int], list[float]]] = field(default_factory=dict)
    drew: set[int] = field(default_factory=set)  # ranks that drew random numbers training
    end: dict[int, dict[str, Any]] = field(default_factory=dict)

    def add(self, rank: int, facts: dict[str, Any]) -> None:
        kind = facts["k"]
        if kind == "start":
            self.start[rank] = facts
        elif kind == "batch":
            self.batches.setdefault(rank, {})[(int(facts["e"]), int(facts["i"]))] = facts
        elif kind == "drew":
            self.drew.add(rank)
        elif kind == "end":
            self.end[rank] = facts
        for step, which, groups in facts.get("lr", []) if kind in ("batch", "lr") else []:
            self.rates.setdefault(rank, {})[(int(step), int(which))] = list(groups)

    def resumed_at(self) -> int:
        """The global step the fit began at (the largest over ranks; 0 from scratch)."""
        return max((int(f["g"]) for f in self.start.values()), default=0)

    def mid_epoch(self) -> bool:
        """It resumed mid-epoch with a loader Lightning cannot resume there (Lightning's
        own test: the global step is not a multiple of the steps per epoch)."""
        for facts in self.start.values():
            steps = math.ceil(int(facts["n"]) / max(1, int(facts["acc"])))
            if facts["n"] > 0 and facts["g"] % max(1, steps) and not facts["resumable"]:
                return True
        return False

    def flag(self, name: str) -> bool:
        return any(bool(facts.get(name)) for facts in self.start.values())


FitsOfRun = dict[int, FitSeen]  # one run's fits, by their index in the process


def fits_of(evidence: Evidence, check: str) -> FitsOfRun:
    """The fits of one run, by their index in the process."""
    run: FitsOfRun = {}
    for event, facts in evidence.observations(check):
        if "k" in facts and "f" in facts:
            run.setdefault(int(facts["f"]), FitSeen()).add(event.rank, facts)
    return run


@dataclass
class Comparison:
    """The verdicts of one comparison: the first failure, warnings, and the weights when
    they are comparable and differ (for the caller to confirm)."""

    name: str
    failures: list[tuple[int, Violation]] = field(default_factory=list)
    warnings: list[Violation] = field(default_factory=list)
    weights: Violation | None = None

    def fail(
        self, step: int, message: str, rank: int | None, cause: str = CAUSE, *, aspect: str
    ) -> None:
        """A failure at ``step``; ``aspect`` names what differs (``Violation.aspect``)."""
        violation = Violation(self.name, message, rank=rank, step=step, cause=cause, aspect=aspect)
        self.failures.append((step, violation))

    def warn(self, message: str, cause: str, rank: int | None = None) -> None:
        if all(w.message != message for w in self.warnings):
            self.warnings.append(
                Violation(self.name, message, rank=rank, cause=cause, warning=True)
            )

    def violations(self) -> list[Violation]:
        """The failures at the first step anything differs (one per aspect: a learning
        rate and a misplaced resume at the same step are both reported, so that whoever
        reads them sees the cause beside its consequence), then two warnings at most."""
        if not self.failures:
            return self.warnings[:2]
        first = min(step for step, _ in self.failures)
        found: dict[str, Violation] = {}
        for step, violation in self.failures:
            if step == first:
                found.setdefault(violation.aspect, violation)
        return [*found.values(), *self.warnings[:2]]


def steps(result: Comparison, origin: FitSeen, fit: FitSeen, drew: bool) -> None:
    """A resumed fit against the reference's, step by step from where it resumed."""
    _rates(result, origin, fit, drew)
    _position(result, origin, fit)
    _samples(result, origin, fit)


def differs(what: str, mine: Any, theirs: Any) -> str:
    return f"{what}: {mine} after the resume, {theirs} uninterrupted"


def draws(fit: FitSeen) -> bool:
    """The fit drew random numbers while it trained (the observer saw the state move), or
    holds a generator of its own whose draws nothing here sees."""
    return fit.flag("private") or bool(fit.drew)


def same_path(reference: FitsOfRun, runs: list[FitsOfRun]) -> bool:
    """No run drew a random number while it trained, and every step both took saw the
    same samples: then the whole job is one deterministic path."""
    for run in runs:
        for index, fit in run.items():
            origin = reference.get(index)
            if origin is None or draws(origin) or draws(fit):
                return False
            for rank, batches in fit.batches.items():
                theirs = origin.batches.get(rank, {})
                if any(k in theirs and theirs[k]["rows"] != b["rows"] for k, b in batches.items()):
                    return False
    return bool(reference)


def _rates(result: Comparison, origin: FitSeen, fit: FitSeen, drew: bool) -> None:
    start = fit.resumed_at()
    for rank, rates in sorted(fit.rates.items()):
        theirs = origin.rates.get(rank, {})
        for (step, which), mine in sorted(rates.items()):
            other = theirs.get((step, which))
            if step < start or other is None or other == mine:
                continue
            group = (
                next(i for i, (a, b) in enumerate(zip(mine, other, strict=False)) if a != b)
                if len(mine) == len(other)
                else 0
            )
            optimizer = f" of optimizer {which}" if which else ""
            what = f"learning rate of group {group}{optimizer} at step {step}"
            a, b = rate_at(mine, group), rate_at(other, group)
            values = f"{a} after the resume, {b} uninterrupted"
            metric = _metric_driver(origin)
            if drew and metric:
                result.warn(
                    f"{what} differs ({values}): not judged",
                    f"{metric} may set it from metrics, and metrics depend on the random "
                    "state, which Lightning does not checkpoint",
                )
            else:
                result.fail(step, f"{what}: {values}", rank, aspect="learning-rate")
            return


def rate_at(rates: list[float], group: int) -> Any:
    """A param group's learning rate, or None where the run has fewer groups."""
    return rates[group] if group < len(rates) else None


def whole(value: Any) -> Any:
    """A count as the reader writes it: 4, not 4.0 (Adam keeps its step as a float)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _metric_driver(fit: FitSeen) -> str:
    """What may set a learning rate from metrics: a plateau scheduler, a monitoring callback."""
    if fit.flag("plateau"):
        return "a ReduceLROnPlateau scheduler"
    for facts in fit.start.values():
        others = [m for m in facts.get("monitors", []) if m not in MONITORS_WITHOUT_RATES]
        if others:
            return f"the monitoring callback {others[0]}"
    return ""


def content_level(fit: FitSeen) -> str:
    """What the reference shows content tells of a sample: "multiset" when every
    complete epoch holds the same samples as often, "set" when the same samples (a
    sampler's padding repeats some), "" when it cannot tell (fewer than two complete
    epochs, or epochs that differ: augmentation, random data, sampling with replacement)."""
    epochs = _complete_epochs(fit)
    if len(epochs) < 2:
        return ""
    counts = [Counter(rows) for rows in epochs.values()]
    if all(c == counts[0] for c in counts):
        return "multiset"
    if all(set(c) == set(counts[0]) for c in counts):
        return "set"
    return ""


def _complete_epochs(fit: FitSeen, since: int = 0) -> dict[int, list[int]]:
    """Every epoch each rank trained all of (from global step ``since`` on): its rows."""
    sizes = {int(f["n"]) for f in fit.start.values()}
    if len(sizes) != 1 or (size := sizes.pop()) <= 0 or not fit.batches:
        return {}
    epochs: dict[int, list[int]] = {}
    for epoch in sorted({e for batches in fit.batches.values() for e, _ in batches}):
        keys = [(epoch, i) for i in range(size)]
        rows: list[int] = []
        for batches in fit.batches.values():
            if not all(k in batches and batches[k]["g"] >= since for k in keys):
                break
            rows += [row for k in keys for row in batches[k]["rows"]]
        else:
            epochs[epoch] = rows
    return epochs


def _position(result: Comparison, origin: FitSeen, fit: FitSeen) -> None:
    """The resumed fit's first batch is where the uninterrupted run was at that step:
    a resume that lands elsewhere skips (or repeats) the batches in between."""
    start = fit.resumed_at()
    sizes = {int(f["n"]) for f in (*fit.start.values(), *origin.start.values())}
    if len(sizes) != 1 or (size := sizes.pop()) <= 0:
        return
    for rank, batches in sorted(fit.batches.items()):
        mine = min((k for k, b in batches.items() if b["g"] >= start), default=None)
        theirs = min(
            (k for k, b in origin.batches.get(rank, {}).items() if b["g"] >= start), default=None
        )
        if mine is None or theirs is None or mine == theirs:
            continue
        gap = (mine[0] * size + mine[1]) - (theirs[0] * size + theirs[1])
        what = f"skipped {gap}" if gap > 0 else f"repeats {-gap}"
        result.fail(
            start,
            f"the fit resumed at step {start} with epoch {mine[0]} batch {mine[1]}, where the "
            f"uninterrupted run trained epoch {theirs[0]} batch {theirs[1]}: the resume "
            f"{what} batches"
            if gap
            else f"the fit resumed at step {start} with epoch {mine[0]} batch {mine[1]}, which the "
            f"uninterrupted run counts as epoch {theirs[0]} batch {theirs[1]}",
            rank,
            POSITION_CAUSE,
            aspect="position",
        )
        return


def _samples(result: Comparison, origin: FitSeen, fit: FitSeen) -> None:
    start = fit.resumed_at()
    resumed_epoch = max((int(f["e"]) for f in fit.start.values()), default=0)
    fixed = origin.flag("fixed") and all(f.get("fixed") for f in fit.start.values())
    level = content_level(origin)
    for rank, batches in sorted(fit.batches.items()):
        theirs = origin.batches.get(rank, {})
        for key, batch in sorted(batches.items()):
            other = theirs.get(key)
            if batch["g"] < start or other is None or other["rows"] == batch["rows"]:
                continue
            if fit.mid_epoch() and key[0] == resumed_epoch:
                message = (
                    f"the ranks trained other samples after a mid-epoch resume at step {start}"
                )
                result.warn(message, LIGHTNING_MID_EPOCH)
                break
            if level and fixed:
                _differ(result, batches, rank, key, start, other)
                return
            break  # content or order the random state may change: epochs below, or nothing
    if level and not fixed:
        _epochs(result, origin, fit, level)


def _differ(
    result: Comparison,
    batches: dict[Key, dict[str, Any]],
    rank: int,
    key: Key,
    start: int,
    other: dict[str, Any],
) -> None:
    """A step of a fixed-order loader that saw other samples than the uninterrupted run."""
    batch = batches[key]
    mine, theirs = batch["rows"], other["rows"]
    since = {row for k, b in batches.items() if k < key and b["g"] >= start for row in b["rows"]}
    changed = sum(1 for a, b in zip(mine, theirs, strict=False) if a != b)
    changed += abs(len(mine) - len(theirs))
    repeated = sum(1 for row in mine if row in since)
    again = f"; it had trained {repeated} of them already since the resume" if repeated else ""
    message = (
        f"rank {rank} trained other samples at step {batch['g']} (epoch {key[0]}, batch "
        f"{key[1]}) after the resume: {changed} of its {len(mine)} samples are not the "
        f"uninterrupted run's{again}"
    )
    result.fail(int(batch["g"]), message, rank, SAMPLES_CAUSE, aspect="samples")


def _epochs(result: Comparison, origin: FitSeen, fit: FitSeen, level: str) -> None:
    """An order the random state decides: each complete epoch after the resume holds the
    reference's samples (as often, where the reference shows epochs do)."""
    mine, theirs = _complete_epochs(fit, fit.resumed_at()), _complete_epochs(origin)
    for epoch in sorted(set(mine) & set(theirs)):
        a, b = Counter(mine[epoch]), Counter(theirs[epoch])
        if level == "set":
            a, b = Counter(set(a)), Counter(set(b))
        if a == b:
            continue
        extra, missing = sum((a - b).values()), sum((b - a).values())
        message = (
            f"in epoch {epoch} after the resume the ranks trained {extra} samples the "
            f"uninterrupted run did not, and missed {missing} it trained"
        )
        steps = [
            int(b_["g"])
            for batches in fit.batches.values()
            for (e, _), b_ in batches.items()
            if e == epoch
        ]
        result.fail(min(steps, default=0), message, None, SAMPLES_CAUSE, aspect="samples")
        return
