"""What a fault that fired amounts to, given what its rank did after it.

A fault its rank came back from is judged as what it then amounts to
(``Fault.ridden_out``): a freeze whose rank ran again was a pause, a delay of the same
length. Whether the rank ran again is read from the run's record: it ended by itself
(returned, raised, was released by a transport error), or it left an event later than
the fault's. The culprit a report names and the oracle's rules read faults the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from chaoslight._report._status import FAILED, PASSED, RELEASED
from chaoslight._runtime._events import NEVER_FIRED, Event, Fired, parse_fired
from chaoslight._schedule._kind import Fault


class HowRankEnded(Protocol):
    """How a rank ended, as a report (``RankResult``) or a check (``RankView``) sees it."""

    @property
    def rank(self) -> int: ...

    @property
    def status(self) -> str: ...


_RAN = (PASSED, FAILED, RELEASED)  # a rank that ended so ran after any freeze of its own


def as_judged(fired: Fired, ranks: Iterable[HowRankEnded], events: Sequence[Event]) -> Fault:
    """``fired``'s fault, or what it amounts to once its rank ran again."""
    fault = fired.fault
    later = fault.ridden_out()
    if later is not fault and ran_again(fired, ranks, events):
        return later
    return fault


def judged_faults(
    events: Sequence[Event], ranks: Iterable[HowRankEnded]
) -> list[tuple[Fired, Fault]]:
    """Every firing of ``events``, with its fault as judged (``as_judged``); a fault text
    this version cannot read is left out, as ``parse_fired`` leaves it."""
    ended = list(ranks)
    return [(fired, as_judged(fired, ended, events)) for fired in parse_fired(events)]


def ran_again(fired: Fired, ranks: Iterable[HowRankEnded], events: Sequence[Event]) -> bool:
    """The rank ran after the fault fired: it ended by itself, or left a later event."""
    if any(r.rank == fired.rank and r.status in _RAN for r in ranks):
        return True
    after = fired.event.time
    return any(
        e.rank == fired.rank and e.time > after and e.kind != NEVER_FIRED and e is not fired.event
        for e in events
    )
