"""The fault-free reference a check compares a run with, recorded once per program.

A check that judges a run against what the program does with no fault (a restarted job
against an uninterrupted one, the planned last step, relations that held at every step)
asks ``fault_free(check, evidence, rerun, runs)``. A campaign runs the empty schedule
twice before it searches, and every check judges those runs: they become the reference,
at no extra cost. Where a check has seen none (a replay from a failure file, a single
``World.run``), the example runs with the empty schedule here, through ``rerun``, as
many times as asked (a World shares those runs among the checks that judge one example:
``_world/_judging.py``).

The references are kept beside the check object (never on it: the object is pickled to
every rank for each run), and only runs where every rank passed count: a reference that
failed is no reference. They belong to one **program**, never to another: the key is the
program (a World's target and its file's size and modification time, so an edited file
is another program; in-process, ``Evidence.program``: the code that ran the Trainer, its
model, the pytest test, see ``_runtime/_program.py``), the world size and the check's
parameters. A fault-free run of another key replaces them: one check object reused
across programs (a module-level list of checks, the pytest plugin, a long-lived World)
judges each by its own runs, or not at all.
"""

from __future__ import annotations

import json
import sys
import weakref
from importlib.machinery import PathFinder
from typing import Any

from chaoslight._report import PASSED
from chaoslight._runtime._evidence import Evidence
from chaoslight._runtime._program import source_stamp
from chaoslight._runtime._protocol import Rerun
from chaoslight._schedule import InvalidArgument, Schedule
from chaoslight._world._target import parse_target

MAX_REFERENCES = 2  # the campaign's two baseline runs; a relation is learned from both

# (the program, its source's stamp, world size, the check's parameters)
ProgramKey = tuple[str, str, int, str]
_KEPT: weakref.WeakKeyDictionary[Any, tuple[ProgramKey, list[Evidence]]] = (
    weakref.WeakKeyDictionary()
)


def program_key(check: Any, evidence: Evidence) -> ProgramKey:
    """What ``check``'s references of ``evidence``'s program are kept by."""
    if evidence.target:
        program, stamp = evidence.target, _target_stamp(evidence.target)
    else:  # in-process: the key holds its files' stamps itself
        program, stamp = evidence.program, ""
    spec = getattr(check, "spec", None)
    params = spec().get("params", {}) if callable(spec) else {}
    shown = json.dumps(params, sort_keys=True, default=repr)
    return program, stamp, len(evidence.ranks), shown


def _target_stamp(target: str) -> str:
    """The size and modification time of the file a target's function is defined in."""
    try:
        spec = parse_target(target)
    except InvalidArgument:
        return "-"
    path = spec.path if spec.path is not None else _module_file(spec.module or "")
    return source_stamp(path) if path else "-"


def _module_file(name: str) -> str | None:
    """The file of module ``name``, found as an import would, importing nothing."""
    module = sys.modules.get(name)
    if module is not None:
        return getattr(module, "__file__", None)
    locations = None
    found = None
    parts = name.split(".")
    for end in range(1, len(parts) + 1):
        found = PathFinder.find_spec(".".join(parts[:end]), locations)
        if found is None:
            return None
        locations = found.submodule_search_locations
    return found.origin if found is not None else None


def _held(check: Any, key: ProgramKey) -> list[Evidence]:
    """``check``'s references of ``key``'s program; none when it holds another's."""
    held = _KEPT.get(check)
    return held[1] if held is not None and held[0] == key else []


def passed_everywhere(evidence: Evidence) -> bool:
    """Every rank returned from the target (and there were ranks)."""
    return bool(evidence.ranks) and all(v.status == PASSED for v in evidence.ranks.values())


def note(check: Any, evidence: Evidence) -> bool:
    """Keep ``evidence`` as a reference of ``check`` when it is one (fault-free, every rank
    passed, fewer than ``MAX_REFERENCES`` kept); True when it is fault-free at all. A
    fault-free run of another program drops the references of the last."""
    if not evidence.fault_free:
        return False
    key = program_key(check, evidence)
    kept = _held(check, key)
    fresh = all(other is not evidence for other in kept)
    if fresh and passed_everywhere(evidence) and len(kept) < MAX_REFERENCES:
        kept = [*kept, evidence]
    _KEPT[check] = (key, kept)
    return True


def fault_free(check: Any, evidence: Evidence, rerun: Rerun, runs: int = 1) -> list[Evidence]:
    """``runs`` fault-free runs of the program ``evidence`` is of (at most
    ``MAX_REFERENCES``): those ``check`` saw, else run now with the empty schedule. Fewer
    when a fault-free run fails on its own (the run's own verdict reports that): then
    there is no reference, and the caller judges nothing it would need one for."""
    runs = min(runs, MAX_REFERENCES)
    note(check, evidence)
    key = program_key(check, evidence)
    kept = _held(check, key)
    tries = 0
    while len(kept) < runs and tries < runs:
        tries += 1
        again = rerun(Schedule())
        if not passed_everywhere(again):
            break
        kept = [*kept, again]
        _KEPT[check] = (key, kept)
    return list(kept[:runs])
