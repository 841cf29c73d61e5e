"""Signatures of Lightning's silent bugs: damage a check sees, in a shape only Lightning makes.

A silent bug leaves no stack and no signal: its run passes on every rank and a check
fails it (``replicas-in-sync``, ``restart-equivalence``). The same violation is what a
program's own bug leaves, so each signature here needs, besides the violation, the facts
the ranks recorded of themselves (``_checks/_facts.py``: the release that ran, manual
optimization, DDP's static graph, the loop progress a resume restored) in exactly the
shape of the upstream report, and claims only the violations that bug produces: at the
step it strikes, of the aspects it changes (``Violation.aspect``: where the resumed fit
started and which samples it trained, how far it counted; never a learning rate, an
optimizer's or a callback's state, which are the program's). Whatever else fired or
failed stays the oracle's to judge. A run without those facts (the facts check not
enabled) matches nothing: the finding stays the program's. The table entries are in
``_known.py``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from chaoslight._checks._facts import facts_by_rank
from chaoslight._checks._order import REPLACED_ORDER
from chaoslight._checks._order_rebuilt import (
    REBUILT_BATCHES,
    SAMPLER_DROPPED,
    SHUFFLE_LOST,
    lost_batches_on,
)
from chaoslight._checks._reruns import faults_leave_training_alone
from chaoslight._report import FAILED, PASSED, Outcome, RankResult
from chaoslight._runtime import Event, Violation
from chaoslight._runtime._evidence import OBSERVATION
from chaoslight._verdict._known_frames import collective_ends, traceback_frames
from chaoslight._verdict._known_issue import NOTHING, Claimed
from chaoslight._verdict._preemption import Delivery

REPLICAS = "replicas-in-sync"
DATA_ORDER = "data-order"
RESTART = "restart-equivalence"


def package_in_facts(outcome: Outcome) -> tuple[str, str] | None:
    """The Lightning distribution and version every rank recorded it ran, or None (no
    facts, or ranks that disagree)."""
    found = {(f.get("package", ""), f.get("version", "")) for f in _facts(outcome).values()}
    if len(found) != 1:
        return None
    package, version = found.pop()
    return (package, version) if package and version else None


def static_graph_first_step(outcome: Outcome, taken: list[Delivery]) -> Claimed:
    """Lightning#18086 (PR #21251): every rank ran manual optimization under DDP's static
    graph, and ``replicas-in-sync`` broke at the first step it observed in this run (DDP
    holds back the first iteration's all-reduce and Lightning's manual path never lets it
    go: the replicas part there). Those violations are the issue's; replicas that part
    later, and every other check's violation, are the program's."""
    facts = _facts(outcome)
    ranks = {r.rank for r in outcome.ranks}
    if not ranks or set(facts) != ranks:
        return NOTHING
    if not all(not f["automatic_optimization"] and f["static_graph"] for f in facts.values()):
        return NOTHING
    first = min(
        (e.step for e in outcome.events if _observed(e, REPLICAS) and e.step is not None),
        default=None,
    )
    if first is None:
        return NOTHING
    return Claimed(
        violations=tuple(v for v in _failing(outcome) if v.check == REPLICAS and v.step == first)
    )


# How far a resumed fit counted (restart-equivalence's aspects): a resume that lands a
# batch off ends a step past, or counts its epochs off, whatever else the program does.
_COUNTS = ("end", "loop-state", "epoch-count")


def repeated_batch_after_resume(outcome: Outcome, taken: list[Delivery]) -> Claimed:
    """Lightning PR #20379: every rank of this run resumed from a checkpoint written
    inside ``on_train_batch_end`` (its batch progress has one batch processed and not
    completed, as ``ModelCheckpoint(every_n_train_steps=...)`` and a mid-epoch
    ``last.ckpt`` leave) and passed: Lightning up to 2.4 trains that batch again and the
    resumed job ends one optimizer step past the uninterrupted one. It claims the
    ``restart-equivalence`` violations of where the fit resumed, what it trained and how
    far it counted; a learning rate, an optimizer's or a callback's state stay the
    program's."""
    facts = _facts_on_every_rank(outcome)
    if facts is None:
        return NOTHING
    if not all(f["resumed"] and f["processed"] == f["completed"] + 1 for f in facts.values()):
        return NOTHING
    return Claimed(violations=_resume_position(outcome))


def epoch_end_resume_count(outcome: Outcome, taken: list[Delivery]) -> Claimed:
    """Lightning PR #20379: every rank of this run resumed from a checkpoint written at an
    epoch's end (Lightning's ``ModelCheckpoint`` saves in ``on_train_epoch_end``, the epoch
    processed and not yet completed) and passed, and its fit began with Lightning's total
    of completed epochs one behind its total processed: up to 2.4 the resume counts that
    epoch finished in the current count only, and ``fit_loop.epoch_progress`` ends one
    epoch short of the uninterrupted fit's while the training is the same. It claims
    ``restart-equivalence``'s violations of that count alone (``epoch-count``: raised only
    where the step, the epoch and every optimizer step agree); the rest stays the
    program's."""
    facts = _facts_on_every_rank(outcome)
    if facts is None or not all(
        f["resumed"] and f.get("epoch_total_processed", 0) == f.get("epoch_total_completed", 0) + 1
        for f in facts.values()
    ):
        return NOTHING
    return Claimed(
        violations=tuple(
            v for v in _failing(outcome) if v.check == RESTART and v.aspect == "epoch-count"
        )
    )


def epoch_end_resume_by_steps(outcome: Outcome, taken: list[Delivery]) -> Claimed:
    """Lightning's ``FitLoop.on_run_start`` (since PR #12821, 1.7.0) counts the restored
    epoch as completed only when ``max_steps`` is not set: every rank of this run trained
    by ``max_steps`` and resumed from a checkpoint written at an epoch end (its epoch
    progress, at the fit's start, has one epoch processed and not completed), after faults
    that ended a run or cannot change training, and passed: the resumed fit trains the next
    epoch's first batch as one more batch of the old epoch. It claims the
    ``restart-equivalence`` violations of where the fit resumed, what it trained and how
    far it counted (the batches shift by one); a learning rate (a warm-up counter of the
    program's own, say), an optimizer's or a callback's state stay the program's, and so
    does a resume by epochs, or from a mid-epoch checkpoint."""
    facts = _facts_on_every_rank(outcome)
    if facts is None or not faults_leave_training_alone(outcome):
        return NOTHING
    if not all(
        f["resumed"]
        and f.get("max_steps", -1) != -1
        and f.get("epoch_processed", 0) == f.get("epoch_completed", 0) + 1
        for f in facts.values()
    ):
        return NOTHING
    return Claimed(violations=_resume_position(outcome))


def resume_workers_epoch_zero(outcome: Outcome, taken: list[Delivery]) -> Claimed:
    """Lightning issue #21938 (since PR #20775, 2.5.3): a fit resumed from an epoch-end
    checkpoint makes its training iterator in ``FitLoop.setup_data``, before the sampler's
    epoch is set, and keeps it; an iterator with worker processes draws its first indices
    from the sampler when it is made, so the first resumed epoch trains on epoch 0's
    order. Every rank of this run resumed at an epoch's start (its batch and epoch
    progress complete, the batches a whole number of epochs) with a training loader that
    has workers and a sampler with ``set_epoch``, after faults that ended a run or cannot
    change training, and passed. It claims ``restart-equivalence``'s violations of the
    samples trained in that first resumed epoch and, with one of those, of the weights the
    job ends with (trained on other samples); a learning rate, a count, an optimizer's or
    a callback's state stay the program's."""
    facts = _facts_on_every_rank(outcome)
    if facts is None or not faults_leave_training_alone(outcome):
        return NOTHING
    windows = {_first_resumed_epoch(f) for f in facts.values()}
    if len(windows) != 1 or None in windows:
        return NOTHING
    (window,) = windows
    assert window is not None
    failing = [v for v in _failing(outcome) if v.check == RESTART]
    samples = tuple(
        v for v in failing if v.aspect == "samples" and v.step is not None and v.step in window
    )
    if not samples:
        return NOTHING
    return Claimed(violations=samples + tuple(v for v in failing if v.aspect == "weights"))


def _first_resumed_epoch(facts: dict[str, Any]) -> range | None:
    """The steps of the first epoch a fit resumed at an epoch's start trains, where its
    training loaders have workers and an epoch-setting sampler; else None."""
    batches = facts.get("train_batches")
    if not isinstance(batches, int) or batches <= 0:
        return None
    at_epoch_start = (
        facts["resumed"]
        and facts["processed"] == facts["completed"]
        and facts.get("epoch_processed") == facts.get("epoch_completed")
        and facts["processed"] == facts.get("epoch_completed", 0) * batches
    )
    if not (at_epoch_start and facts.get("train_workers", 0) > 0 and facts.get("train_set_epoch")):
        return None
    start = int(facts.get("global_step", facts["processed"]))
    return range(start, start + batches)


def fabric_loader_epoch_restarted(outcome: Outcome, taken: list[Delivery]) -> Claimed:
    """Lightning Fabric's loader (``setup_dataloaders``) sets its sampler's epoch, at each
    pass it begins, to the number of passes begun over it (since PR #16841, 2.0.0): over
    the program's own ``set_epoch``, and from 0 again in a restarted process, which no
    public call restores. A restarted job whose every rank passed, after faults that ended
    a run or cannot change training, began its first pass over a Fabric loader with a
    shuffling DistributedSampler at epoch 0, where its earlier run had gone past its first
    pass: it claims ``restart-equivalence``'s violations of the samples trained from the
    earlier run's second pass's step on (the resume was past epoch 0, and the order read
    was epoch 0's); a learning rate, an optimizer's state, a step skipped stay the
    program's, and so do other samples within the first pass (a mid-epoch resume that does
    not skip what it trained)."""
    if not outcome.attempts or not all(r.status == PASSED for r in outcome.ranks):
        return NOTHING
    if not faults_leave_training_alone(outcome):
        return NOTHING
    loops = _fabric_first_passes(outcome)
    steps = [
        e.step
        for e in outcome.attempts[0].events
        if _observed(e, DATA_ORDER) and e.step is not None
        for facts in [json.loads(e.detail)]
        if facts.get("loop") in loops and facts.get("epoch") == 1
    ]
    if not steps:
        return NOTHING
    second_pass = min(steps)
    return Claimed(
        violations=tuple(
            v
            for v in _failing(outcome)
            if v.check == RESTART
            and v.aspect == "samples"
            and v.step is not None
            and v.step >= second_pass
        )
    )


def _fabric_first_passes(outcome: Outcome) -> set[str]:
    """The loaders whose first pass in this run went through Fabric's wrapper with a
    shuffling DistributedSampler at epoch 0 (``_checks/_order_loops``)."""
    found = set()
    for event in outcome.events:
        if not _observed(event, DATA_ORDER):
            continue
        facts = json.loads(event.detail)
        if facts.get("epoch") != 0 or not facts.get("fabric"):
            continue
        samplers = [s for loader in facts.get("loaders", []) for s in loader.get("samplers", [])]
        if samplers and all(s.get("shuffle") and s.get("epoch") == 0 for s in samplers):
            found.add(str(facts.get("loop")))
    return found


def package_in_fabric_passes(outcome: Outcome) -> tuple[str, str] | None:
    """The Fabric distribution and version whose loader wrapper the ranks' passes went
    through (data-order's loop observations), or None."""
    found = {
        tuple(facts["fabric"])
        for event in outcome.events
        if _observed(event, DATA_ORDER)
        for facts in [json.loads(event.detail)]
        if isinstance(facts.get("fabric"), list) and len(facts["fabric"]) == 2
    }
    if len(found) != 1:
        return None
    package, version = found.pop()
    return (str(package), str(version)) if package and version else None


def custom_sampler_shuffled(outcome: Outcome, taken: list[Delivery]) -> Claimed:
    """Lightning#21131 / #21447: for training under DDP with ``use_distributed_sampler``,
    Lightning wraps a sampler of the program's own in ``DistributedSamplerWrapper`` with
    ``shuffle=True``, which shuffles the order the sampler gives (a curriculum, a fixed
    order). It claims ``data-order``'s violations of that replaced order, which only
    Lightning's wrapper makes (the check reads the wrapper and the program's order from
    the ranks' loaders), whatever else fired; every other data-order finding, a coverage
    hole or an order that never reshuffles, stays the program's."""
    failing = _failing(outcome)
    return Claimed(
        violations=tuple(v for v in failing if (v.check, v.aspect) == (DATA_ORDER, REPLACED_ORDER))
    )


def batch_sampler_rebuilt(outcome: Outcome, taken: list[Delivery]) -> Claimed:
    """Lightning#21122: under DDP with ``use_distributed_sampler`` Lightning rebuilds a
    loader given a batch sampler around a DistributedSampler over the whole data set (it
    reads ``loader.sampler``, torch's SequentialSampler whenever a batch sampler is given):
    a torch ``BatchSampler`` comes back with batches of one, and a sampler the batch
    sampler held is dropped. It claims ``data-order``'s violations of exactly those two
    losses (the check compares the loader the program gave with the one Lightning made),
    whatever else fired.

    A loader built outside the ``*_dataloader`` hooks is rebuilt with no batch size at
    all, and its first batch fails in torch's collation: the ranks Lightning readied such
    a loader on that failed there are the issue's, and so are their peers' ends in a
    collective (released by the rank that left)."""
    lost = lost_batches_on(getattr(outcome, "events", ()), DATA_ORDER)
    failed = frozenset(r.rank for r in outcome.ranks if r.rank in lost and _failed_collating(r))
    ranks = failed | collective_ends(outcome) if failed else frozenset()
    return Claimed(ranks, _aspects(outcome, (REBUILT_BATCHES, SAMPLER_DROPPED)).violations)


# Where torch batches samples (its collate and fetch), as a traceback names the file.
_COLLATION = re.compile(r"torch[/\\]utils[/\\]data[/\\]_utils[/\\]")


def _failed_collating(result: RankResult) -> bool:
    """The rank failed with an error raised in torch's collation of a batch."""
    exc = result.exception
    if result.status != FAILED or exc is None:
        return False
    frames = traceback_frames(exc.traceback)  # innermost first
    return bool(frames) and _COLLATION.search(frames[0][0]) is not None


def evaluation_shuffle_lost(outcome: Outcome, taken: list[Delivery]) -> Claimed:
    """Lightning#20326 (fixed in 2.5.0): an evaluation loader given a batch sampler over a
    RandomSampler is rebuilt around a DistributedSampler(shuffle=False). It claims
    ``data-order``'s violations of that lost shuffle, whatever else fired."""
    return _aspects(outcome, (SHUFFLE_LOST,))


def _aspects(outcome: Outcome, aspects: tuple[str, ...]) -> Claimed:
    failing = _failing(outcome)
    return Claimed(
        violations=tuple(v for v in failing if v.check == DATA_ORDER and v.aspect in aspects)
    )


def _resume_position(outcome: Outcome) -> tuple[Violation, ...]:
    """What a resume Lightning lands a batch off explains: where restart-equivalence saw
    the resumed fit start elsewhere than the uninterrupted run (``position``), everything
    it reports (from that step on the whole fit is shifted: the samples, an epoch-interval
    scheduler's learning rate, the counts); without that evidence only the counts (a
    learning rate or the samples apart, with the resume in place, are the program's: a
    warm-up counter lost, a sampler's epoch forgotten)."""
    failing = [v for v in _failing(outcome) if v.check == RESTART]
    if any(v.aspect == "position" for v in failing):
        return tuple(failing)
    return tuple(v for v in failing if v.aspect in _COUNTS)


def _facts(outcome: Outcome) -> dict[int, dict[str, Any]]:
    return facts_by_rank(getattr(outcome, "events", ()))


def _facts_on_every_rank(outcome: Outcome) -> dict[int, dict[str, Any]] | None:
    """Every rank's facts, where every rank recorded them and passed."""
    facts = _facts(outcome)
    ranks = getattr(outcome, "ranks", ())
    if not ranks or set(facts) != {r.rank for r in ranks}:
        return None
    return facts if all(r.status == PASSED for r in ranks) else None


def _failing(outcome: Outcome) -> list[Violation]:
    return [v for v in outcome.violations if not v.warning]


def _observed(event: Event, check: str) -> bool:
    return bool(event.kind == OBSERVATION and event.site == check)
