"""``RestartEquivalence``: a job that crashed (or was preempted) and restarted trains on
as an uninterrupted one would, in everything the random state cannot change.

A requeued job resumes from its checkpoint. Lightning's checkpoints hold no random
state, so after any restart a correct program with dropout or a shuffled loader ends
with other weights: comparing weights finds nothing soundly. What a correct program
keeps identical whatever the random state is compared instead (``_restart_compare``):
the learning rate at every optimizer step after the resume point, the samples each
rank trains on step by step, the counters and states at the end; and the weights too
where the reference shows the program draws no random number while it trains.

Judged only on a run whose job restarted (``evidence.attempts``) and whose last run
passed on every rank, against a fault-free run of the same example (kept from the
campaign's baseline, else run once). A run where a fault that may change training
fired (an error the program may catch and skip a batch on; anything in the last run
but a benign fault) is not judged: a correct program may then end elsewhere. A restart
that trains again from step 0 is what a job without checkpoints (or with a warm start
of its own) does: not judged either.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chaoslight._checks._base import Check, Evidence, Violation
from chaoslight._checks._reference import fault_free, note, passed_everywhere
from chaoslight._checks._reruns import LIGHTNING_MID_EPOCH, faults_leave_training_alone
from chaoslight._checks._restart_compare import (
    CAUSE,
    Comparison,
    FitSeen,
    FitsOfRun,
    differs,
    draws,
    fits_of,
    same_path,
    steps,
    whole,
)
from chaoslight._checks._restart_facts import observer
from chaoslight._checks._restart_loops import compare_loops, is_loop, loop_hooks, loop_of
from chaoslight._runtime._protocol import Rerun


class RestartEquivalence(Check):
    """After a crash or preemption and a restart (a schedule with ``restarts``), the job
    trains as an uninterrupted fault-free run would, from the step it resumed at: the
    same learning rates, samples, step counts and states; the same weights where the
    program draws no random number while it trains. World only (it needs restarts)."""

    name = "restart-equivalence"
    cause = CAUSE

    def observer(self) -> Any:
        return observer(self.name, loop_hooks(self.name))

    def judge(self, evidence: Evidence) -> list[Violation]:
        return []  # a restart needs a World: see judge_reruns

    def judge_reruns(self, evidence: Evidence, rerun: Rerun, scratch: Path) -> list[Violation]:
        if note(self, evidence) or not evidence.attempts or not passed_everywhere(evidence):
            return []  # a reference kept, no restart, or a last run the verdict judges itself
        if not faults_leave_training_alone(evidence):
            return []
        if is_loop(evidence, self.name):
            return self._judge_loop(evidence, rerun)
        runs = [fits_of(run, self.name) for run in (*evidence.attempts, evidence)]
        if not any(fit.resumed_at() > 0 for run in runs[1:] for fit in run.values()):
            return []  # every restart trained from step 0: nothing was resumed
        references = fault_free(self, evidence, rerun, 1)
        if not references:
            return []
        result = compare(self.name, fits_of(references[0], self.name), runs)
        violations = result.violations()
        # Deterministic as far as the random state shows; a second fault-free run rules
        # out what it cannot show (nondeterministic kernels) before the weights count.
        failing = any(not v.warning for v in violations)
        if result.weights is not None and not failing and _references_agree(self, evidence, rerun):
            violations = [result.weights, *violations]
        return violations

    def _judge_loop(self, evidence: Evidence, rerun: Rerun) -> list[Violation]:
        """A loop no Trainer runs (``_restart_loops``): judged where the job is one
        deterministic path, against two fault-free runs that agree."""
        runs = [loop_of(run, self.name) for run in (*evidence.attempts, evidence)]
        if not runs[-1].steps or runs[-1].drew:
            return []
        references = [loop_of(run, self.name) for run in fault_free(self, evidence, rerun, 2)]
        result = compare_loops(self.name, references, runs)
        return result.violations() if result is not None else []


def _references_agree(check: Any, evidence: Evidence, rerun: Rerun) -> bool:
    """Two fault-free runs end with the same weights (so a difference is the restart's)."""
    references = fault_free(check, evidence, rerun, 2)
    if len(references) < 2:
        return False
    first, second = (_ends(check, run) for run in references)
    for rank, facts in first.items():
        other = second.get(rank)
        if other is None or "w" not in facts or "w" not in other:
            return False
        if weights_differ(check.name, facts["w"], other["w"], rank, 0) is not None:
            return False
    return bool(first)


def _ends(check: Any, evidence: Evidence) -> dict[int, dict[str, Any]]:
    """The last fit's end facts per rank."""
    run: FitsOfRun = fits_of(evidence, check.name)
    return run[max(run)].end if run else {}


def compare(name: str, reference: FitsOfRun, runs: list[FitsOfRun]) -> Comparison:
    """``runs``: the job's runs in order, the last one last. Each resumed fit (one that
    began past step 0) is compared from where it began; the last run's ends too."""
    result = Comparison(name)
    same = same_path(reference, runs)
    for run in runs[1:]:
        for index, fit in sorted(run.items()):
            origin = reference.get(index)
            if origin is not None and fit.resumed_at() > 0:
                drew = draws(origin) or any(draws(r[index]) for r in runs if index in r)
                steps(result, origin, fit, drew)
    for index, fit in sorted(runs[-1].items()):
        origin = reference.get(index)
        if origin is not None and fit.resumed_at() > 0 and _ended(origin, fit):
            _end(result, origin, fit, same, index)
    return result


def _ended(origin: FitSeen, fit: FitSeen) -> bool:
    ranks = set(origin.start) | set(fit.start)
    return bool(ranks) and ranks <= set(origin.end) and ranks <= set(fit.end)


def _end(result: Comparison, origin: FitSeen, fit: FitSeen, same: bool, index: int) -> None:
    """The end of a resumed fit of the last run against the reference's: step and epoch,
    the fit loop's totals, the optimizers, the callbacks; the weights on the same path."""
    for rank in sorted(fit.end):
        mine, theirs = fit.end[rank], origin.end[rank]
        step = int(mine["g"])
        for key, what in (("g", "global_step"), ("e", "epoch")):
            if mine[key] != theirs[key]:
                if fit.flag("timer") or ((mine["stop"] or theirs["stop"]) and not same):
                    return  # a Timer, or a callback deciding from metrics, ended a fit
                where = f"{what} at the end of fit {index}"
                result.fail(step, differs(where, mine[key], theirs[key]), rank, aspect="end")
                return
        found = _leaves(_totals(mine["loop"]), _totals(theirs["loop"]), exact=True)
        for path, a, b in found[:1]:
            message = differs(f"fit loop state {path!r} at the end", a, b)
            if fit.mid_epoch():
                result.warn(message, LIGHTNING_MID_EPOCH, rank)
            elif all(leaf.startswith(EPOCH_COUNT) for leaf, _, _ in found):
                # Lightning's own count of completed epochs, alone apart while the step,
                # the epoch and every optimizer step agree: a miscount of Lightning's (up
                # to 2.4.x a resume from an epoch-end checkpoint counts one fewer), which
                # explains nothing else: the rest is compared still.
                result.fail(step, message, rank, aspect="epoch-count")
            else:
                result.fail(step, message, rank, aspect="loop-state")
                return
        if _optimizers(result, mine["opt"], theirs["opt"], rank, step, same):
            return
        if _callbacks(result, mine["cb"], theirs["cb"], (rank, step), same, fit.mid_epoch()):
            return
        if same and "w" in mine and "w" in theirs and result.weights is None:
            result.weights = weights_differ(result.name, mine["w"], theirs["w"], rank, step)


Leaf = tuple[str, Any, Any]  # a state's path, its value after the resume, uninterrupted
EPOCH_COUNT = "epoch_progress."  # the fit loop's count of epochs, in its state's paths


def _totals(loop: dict[str, Any]) -> dict[str, Any]:
    """The fit loop's running totals of what it completed: epochs, batches, optimizer
    steps. Not what was only ready or started (a batch a crash or a preemption caught in
    flight is counted again), not the per-epoch ``current`` ones (reset on a restart),
    not validation's (a restart may validate again), not the schedulers' (their effect,
    the learning rate, is compared step by step), not ``_batches_that_stepped`` (the
    loggers' step, which Lightning advances by one on some resumes), not the batch
    counters (a checkpoint written at a batch's end holds ``completed`` one behind
    ``processed``, Lightning#18060, and a fit resumed from it ends one behind having
    trained the same batches: which batches it trained is compared step by step), not the
    ``zero_grad`` calls (a checkpoint written while a step was in flight, as
    ``OnExceptionCheckpoint``'s is and Lightning resumes from by itself, has that step's
    ``zero_grad`` counted and not its optimizer step: the resumed fit counts one more
    ``zero_grad`` having trained the same; the optimizer steps are compared)."""
    return {
        path: value
        for path, value in loop.items()
        if path.endswith(".total.completed")
        and "val_loop" not in path
        and "scheduler_progress" not in path
        and "batch_progress" not in path
        and ".zero_grad." not in path
    }


def _optimizers(
    result: Comparison, mine: list[Any], theirs: list[Any], rank: int, step: int, same: bool
) -> bool:
    """State names and step counts: each parameter's on the same path, else the largest
    (a parameter may miss a step where random draws left it without a gradient)."""
    if len(mine) != len(theirs):
        result.fail(step, differs("optimizers", len(mine), len(theirs)), rank, aspect="optimizer")
        return True
    for which, (a, b) in enumerate(zip(mine, theirs, strict=True)):
        if a["keys"] != b["keys"]:
            what = f"optimizer {which} state"
            result.fail(step, differs(what, a["keys"], b["keys"]), rank, aspect="optimizer")
            return True
        params = sorted(set(a["steps"]) | set(b["steps"]), key=lambda p: (len(p), p))
        pairs = [(f" of parameter {p}", a["steps"].get(p), b["steps"].get(p)) for p in params]
        if not same:
            pairs = [("", max(a["steps"].values(), default=0), max(b["steps"].values(), default=0))]
        for whose, x, y in pairs:
            if x != y:
                what = f"optimizer {which} step count{whose} at the end"
                result.fail(step, differs(what, whole(x), whole(y)), rank, aspect="optimizer")
                return True
    return False


def _callbacks(
    result: Comparison,
    mine: dict[str, Any],
    theirs: dict[str, Any],
    where: tuple[int, int],
    same: bool,
    mid_epoch: bool,
) -> bool:
    """Callback states: counters (whole numbers and flags), and tensors on the same path;
    a callback that monitors a metric only on the same path."""
    rank, step = where
    for key in sorted(set(mine) & set(theirs)):
        if theirs[key]["metric"] and not same:
            continue
        for path, a, b in _leaves(mine[key]["leaves"], theirs[key]["leaves"], exact=same)[:1]:
            message = differs(f"callback {key} state {path!r} at the end", a, b)
            if mid_epoch:  # the samples differed, and what a callback counts of them may
                result.warn(message, LIGHTNING_MID_EPOCH, rank)
                return False
            result.fail(step, message, rank, aspect="callbacks")
            return True
    return False


def _leaves(mine: dict[str, Any], theirs: dict[str, Any], exact: bool) -> list[Leaf]:
    """Leaves present on both sides that differ: whole numbers and flags; tensors too
    when ``exact``. Never floats or text: a callback may keep a wall-clock time, a
    logger's version folder, a metric."""
    found = []
    for path, a in mine.items():
        b = theirs.get(path, a)
        counter = isinstance(a, int) and isinstance(b, int)
        tensor = exact and isinstance(a, list) and isinstance(b, list)
        if a != b and (counter or tensor):
            found.append((path, a, b))
    return found


def weights_differ(
    name: str, mine: dict[str, Any], theirs: dict[str, Any], rank: int, step: int
) -> Violation | None:
    """The first parameter or buffer whose checksums differ, as a violation."""
    if mine["names"] != theirs["names"]:
        message = "the model ends with other parameters"
        return Violation(name, message, rank, step, CAUSE, aspect="weights")
    for param, a, b in zip(mine["names"], mine["sums"], theirs["sums"], strict=True):
        if a != b:
            message = (
                f"parameter {param!r} ends differently than in an uninterrupted run (checksum "
                f"difference {abs(a[0] - b[0]):.3g}), and the program draws no random number"
            )
            return Violation(name, message, rank=rank, step=step, cause=CAUSE, aspect="weights")
    return None
