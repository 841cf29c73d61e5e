"""The check protocol: observers that run in every rank, a judge that runs after.

A check has two halves, so the same object works in one process and across ranks:

- ``observer()``: a Lightning callback attached to the running Trainer in each rank.
  It records *observations* (small JSON facts: a checksum, a loss's finiteness, a
  batch's row hashes) as events of kind ``observation`` in the rank's event log. So
  they travel with the events: to the ``Run`` in-process, through the per-rank event
  files to a World's parent. Nothing extra crosses the process group.
- ``judge(evidence)``: after the run, from every rank's observations and results,
  return the violations: what differed, where (rank, step, parameter), and the usual
  cause in one line. A violation makes the outcome **failed**.

A user check is any object with ``name``, ``observer()`` and ``judge(evidence)``;
subclass :class:`Check` and override what you need (see ``examples/user_check.py``).
"""

from __future__ import annotations

import functools
import json
from typing import Any

from chaoslight._runtime._context import callback_bases, current_rank, step_of
from chaoslight._runtime._evidence import OBSERVATION, Evidence, RankView, Violation
from chaoslight._runtime._inject import active
from chaoslight._runtime._stacks import active_engine

__all__ = [
    "CANNOT_JUDGE",
    "OBSERVATION",
    "Check",
    "Evidence",
    "RankView",
    "Violation",
    "cannot_judge",
    "observe",
    "observer_class",
]

# The key of an observation in which a check says it cannot judge this program, and why:
# said once by the check itself, since "observed nothing" is not "had nothing to judge"
# (finite-loss records only a loss that is not finite). A campaign's coverage note reads it.
CANNOT_JUDGE = "cannot_judge"


class Check:
    """Base class of the built-in checks; a user check may subclass it."""

    name = "check"

    def observer(self) -> Any:
        """A Lightning callback to attach in each rank, or None."""
        return None

    def judge(self, evidence: Evidence) -> list[Violation]:
        return []

    def spec(self) -> dict[str, Any]:
        """Name and parameters, to rebuild this check in another process."""
        params = {k: v for k, v in vars(self).items() if not k.startswith("_")}
        return {"name": self.name, "params": params}

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.spec()["params"].items())
        return f"{type(self).__name__}({params})"


def observe(check: str, trainer: Any, facts: dict[str, Any], step: int | None = None) -> None:
    """Record an observation in the active injection's event log (no-op when none), at
    ``step``, else the trainer's step, else (no trainer: a loop) the loop's step."""
    injection = active()
    engine = injection.engine if injection is not None else None
    if engine is None:
        return
    if step is None:
        step = step_of(trainer) if trainer is not None else engine.step()
    engine.record(OBSERVATION, check, current_rank(), step, "", detail=json.dumps(facts))


def cannot_judge(check: str, reason: str) -> None:
    """Record that ``check`` cannot judge this program, and why (its judge skips it)."""
    observe(check, None, {CANNOT_JUDGE: reason})


def observer_class(name: str, hooks: dict[str, Any]) -> type:
    """A callback class subclassing both Lightning flavours' Callback, with these hooks.

    Each hook runs as chaoslight's own code: its torch calls pass through every site (a
    deferred OOM surfaces in the user's code, not at a check's ``.tolist()``; a memory
    budget does not count a check's tensors; a fault aimed at a collective does not fire
    in a check's)."""
    return type(name, callback_bases(), {key: _internal(hook) for key, hook in hooks.items()})


def _internal(hook: Any) -> Any:
    @functools.wraps(hook)
    def run(*args: Any, **kwargs: Any) -> Any:
        engine = active_engine()
        if engine is None:
            return hook(*args, **kwargs)
        with engine.internal():
            return hook(*args, **kwargs)

    return run
