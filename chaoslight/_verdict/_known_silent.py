"""Signatures of Lightning's silent bugs: damage a check sees, in a shape only Lightning makes.

A silent bug leaves no stack and no signal: its run passes on every rank and a check
fails it (``replicas-in-sync``, ``restart-equivalence``). The same violation is what a
program's own bug leaves, so each signature here needs, besides the violation, the facts
the ranks recorded of themselves (``_checks/_facts.py``: the release that ran, manual
optimization, DDP's static graph, the loop progress a resume restored) in exactly the
shape of the upstream report, and no fault but benign ones in the run. A run without
those facts (the facts check not enabled) matches nothing: the finding stays the
program's. The table entries are in ``_known.py``.
"""

from __future__ import annotations

from typing import Any

from chaoslight._checks._facts import facts_by_rank
from chaoslight._checks._restart import faults_leave_training_alone
from chaoslight._report import PASSED
from chaoslight._runtime import FIRED
from chaoslight._runtime._evidence import OBSERVATION
from chaoslight._schedule import InvalidSchedule, fault_from_text
from chaoslight._verdict._severity import BENIGN, fault_class

REPLICAS = "replicas-in-sync"
RESTART = "restart-equivalence"


def package_in_facts(outcome: Any) -> tuple[str, str] | None:
    """The Lightning distribution and version every rank recorded it ran, or None (no
    facts, or ranks that disagree)."""
    found = {(f.get("package", ""), f.get("version", "")) for f in _facts(outcome).values()}
    if len(found) != 1:
        return None
    package, version = found.pop()
    return (package, version) if package and version else None


def static_graph_first_step(outcome: Any, taken: Any) -> bool:
    """Lightning#18086 (PR #21251): every rank ran manual optimization under DDP's static
    graph, every rank passed under benign faults at most, and the only failing check is
    ``replicas-in-sync``, first broken at the first step it observed in this run (DDP
    holds back the first iteration's all-reduce and Lightning's manual path never lets it
    go: the replicas part there). Replicas that part later are the program's."""
    facts = _facts_on_every_rank(outcome)
    if facts is None or not _quiet(outcome):
        return False
    if not all(not f["automatic_optimization"] and f["static_graph"] for f in facts.values()):
        return False
    failing = _failing(outcome)
    if not failing or any(v.check != REPLICAS for v in failing):
        return False
    first = min(
        (e.step for e in outcome.events if _observed(e, REPLICAS) and e.step is not None),
        default=None,
    )
    return first is not None and min(v.step for v in failing if v.step is not None) == first


def repeated_batch_after_resume(outcome: Any, taken: Any) -> bool:
    """Lightning PR #20379: every rank of this run resumed from a checkpoint written
    inside ``on_train_batch_end`` (its batch progress has one batch processed and not
    completed, as ``ModelCheckpoint(every_n_train_steps=...)`` and a mid-epoch
    ``last.ckpt`` leave), every rank passed under benign faults at most, and the only
    failing check is ``restart-equivalence``: Lightning up to 2.4 trains that batch
    again and the resumed job ends one optimizer step past the uninterrupted one."""
    facts = _facts_on_every_rank(outcome)
    if facts is None or not _quiet(outcome):
        return False
    if not all(f["resumed"] and f["processed"] == f["completed"] + 1 for f in facts.values()):
        return False
    failing = _failing(outcome)
    return bool(failing) and all(v.check == RESTART for v in failing)


def epoch_end_resume_by_steps(outcome: Any, taken: Any) -> bool:
    """Lightning's ``FitLoop.on_run_start`` (since PR #12821, 1.7.0) counts the restored
    epoch as completed only when ``max_steps`` is not set: every rank of this run trained
    by ``max_steps`` and resumed from a checkpoint written at an epoch end (its epoch
    progress, at the fit's start, has one epoch processed and not completed), the job
    restarted after faults that ended a run or cannot change training, every rank passed
    under benign faults at most, and the only failing check is ``restart-equivalence``:
    the resumed fit trains the next epoch's first batch as one more batch of the old
    epoch. A resume by epochs, or from a mid-epoch checkpoint, is the program's."""
    facts = _facts_on_every_rank(outcome)
    if facts is None or not _quiet(outcome) or not faults_leave_training_alone(outcome):
        return False
    if not all(
        f["resumed"]
        and f.get("max_steps", -1) != -1
        and f.get("epoch_processed", 0) == f.get("epoch_completed", 0) + 1
        for f in facts.values()
    ):
        return False
    failing = _failing(outcome)
    return bool(failing) and all(v.check == RESTART for v in failing)


def _facts(outcome: Any) -> dict[int, dict[str, Any]]:
    return facts_by_rank(getattr(outcome, "events", ()))


def _facts_on_every_rank(outcome: Any) -> dict[int, dict[str, Any]] | None:
    """Every rank's facts, where every rank recorded them and passed."""
    facts = _facts(outcome)
    ranks = getattr(outcome, "ranks", ())
    if not ranks or set(facts) != {r.rank for r in ranks}:
        return None
    return facts if all(r.status == PASSED for r in ranks) else None


def _quiet(outcome: Any) -> bool:
    """No fault but benign ones fired in this run (a harder one may be the cause)."""
    budget = getattr(outcome.schedule, "memory_budget", None)
    for event in outcome.events:
        if event.kind != FIRED:
            continue
        try:
            fault = fault_from_text(event.fault)
        except InvalidSchedule:
            return False  # a fault this version cannot read: do not call the run Lightning's
        if fault_class(fault, budget) != BENIGN:
            return False
    return True


def _failing(outcome: Any) -> list[Any]:
    return [v for v in outcome.violations if not v.warning]


def _observed(event: Any, check: str) -> bool:
    return bool(event.kind == OBSERVATION and event.site == check)
