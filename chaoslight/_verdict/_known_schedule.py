"""Signatures of Lightning's own scheduling decisions that ranks take apart.

Lightning decides some things per rank that every rank must decide alike, because each
one runs collectives: when to validate is one. With ``val_check_interval`` given as a
time (``timedelta``, ``"DD:HH:MM:SS"``, a dict), Lightning 2.6's training loop asks each
rank's own clock (``_should_check_val_fx``: ``time.monotonic() - _last_val_time >=
interval``), with no agreement between ranks: the rank a little ahead or behind (a slow
batch, a loaded host, a straggler fault) validates at another batch than its peers, and
the validation's collectives (a synced log, a checkpoint's barrier) meet a peer's
training collectives, or no peer at all. A signature here needs the facts the ranks
recorded of themselves (``_checks/_facts.py``: the time-based interval) and the ranks
apart at that decision; without those facts it matches nothing.
"""

from __future__ import annotations

import re

from chaoslight._checks._facts import facts_by_rank
from chaoslight._report import CRASHED, FAILED, HUNG, PASSED, Outcome
from chaoslight._verdict._known_issue import NOTHING, Claimed
from chaoslight._verdict._preemption import Delivery

# A faulthandler frame of Lightning's evaluation loop (either flavour): a rank validating.
_VALIDATING = re.compile(r"(lightning/pytorch|pytorch_lightning)/loops/evaluation_loop\.py\"")
# What gloo says when two ranks pair collectives of different sizes.
_MISMATCH = re.compile(r"size doesn't match|op\.preamble\.length <= op\.nbytes")


def time_based_validation_apart(outcome: Outcome, taken: list[Delivery]) -> Claimed:
    """Every rank recorded a time-based validation interval, and the ranks were apart at
    the decision to validate: one hung inside Lightning's evaluation loop while a peer
    was elsewhere or had ended, or a rank died of gloo's size-mismatch abort (the
    validation's collective paired with a training one). The ranks' ends are the issue's;
    violations of checks stay the program's."""
    facts = facts_by_rank(outcome.events)
    ranks = {r.rank for r in outcome.ranks}
    if not ranks or set(facts) != ranks:
        return NOTHING
    if not all(f.get("val_check_seconds") is not None for f in facts.values()):
        return NOTHING
    validating = {
        r.rank for r in outcome.ranks if r.status == HUNG and _VALIDATING.search(_text(r.stacks))
    }
    elsewhere = {
        r.rank
        for r in outcome.ranks
        if r.status == PASSED or (r.status == HUNG and not _VALIDATING.search(_text(r.stacks)))
    }
    mismatched = any(
        r.status in (CRASHED, FAILED) and _MISMATCH.search(_text(r.output) + _error(r))
        for r in outcome.ranks
    )
    if (validating and elsewhere) or mismatched:
        return Claimed(frozenset(r.rank for r in outcome.ranks if r.status != PASSED))
    return NOTHING


def _text(value: str | None) -> str:
    return (value or "").replace("\\", "/")


def _error(result: object) -> str:
    exception = getattr(result, "exception", None)
    return f"{exception}" if exception is not None else ""
