"""The fault-free reference a check compares a run with, recorded once per example.

A check that judges a run against what the program does with no fault (a restarted job
against an uninterrupted one, the planned last step, relations that held at every step)
asks ``fault_free(check, evidence, rerun, runs)``. A campaign runs the empty schedule
twice before it searches, and every check judges those runs: they become the reference,
at no extra cost. Where a check has seen none (a replay from a failure file, a single
``World.run``), the example runs with the empty schedule here, through ``rerun``, as
many times as asked.

The references are kept beside the check object (never on it: the object is pickled to
every rank for each run), per target and world size, and only runs where every rank
passed count: a reference that failed is no reference.
"""

from __future__ import annotations

import weakref
from typing import Any

from chaoslight._report import PASSED
from chaoslight._runtime._evidence import Evidence
from chaoslight._runtime._protocol import Rerun
from chaoslight._schedule import Schedule

MAX_REFERENCES = 2  # the campaign's two baseline runs; a relation is learned from both

ExampleKey = tuple[str, int]  # (target, world size)
_KEPT: weakref.WeakKeyDictionary[Any, dict[ExampleKey, list[Evidence]]] = (
    weakref.WeakKeyDictionary()
)


def _key(evidence: Evidence) -> ExampleKey:
    return evidence.target, len(evidence.ranks)


def passed_everywhere(evidence: Evidence) -> bool:
    """Every rank returned from the target (and there were ranks)."""
    return bool(evidence.ranks) and all(v.status == PASSED for v in evidence.ranks.values())


def note(check: Any, evidence: Evidence) -> bool:
    """Keep ``evidence`` as a reference of ``check`` when it is one (fault-free, every rank
    passed, fewer than ``MAX_REFERENCES`` kept); True when it is fault-free at all."""
    if not evidence.fault_free:
        return False
    kept = _KEPT.setdefault(check, {}).setdefault(_key(evidence), [])
    fresh = all(other is not evidence for other in kept)
    if fresh and passed_everywhere(evidence) and len(kept) < MAX_REFERENCES:
        kept.append(evidence)
    return True


def fault_free(check: Any, evidence: Evidence, rerun: Rerun, runs: int = 1) -> list[Evidence]:
    """``runs`` fault-free runs of the example ``evidence`` is of (at most
    ``MAX_REFERENCES``): those ``check`` saw, else run now with the empty schedule. Fewer
    when a fault-free run fails on its own (the run's own verdict reports that): then
    there is no reference, and the caller judges nothing it would need one for."""
    runs = min(runs, MAX_REFERENCES)
    note(check, evidence)
    kept = _KEPT.setdefault(check, {}).setdefault(_key(evidence), [])
    tries = 0
    while len(kept) < runs and tries < runs:
        tries += 1
        again = rerun(Schedule())
        if not passed_everywhere(again):
            break
        kept.append(again)
    return list(kept[:runs])


def forget(check: Any) -> None:
    """Drop ``check``'s references (a test that reuses one check on a changed program)."""
    _KEPT.pop(check, None)
