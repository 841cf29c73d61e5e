"""What a verdict notes of a silent fault (a kind's ``silent`` trait: a flipped bit): was
it seen, and by what, or did it leave no trace?

Never a failure by itself. A flip leaves no trace in many correct programs: Adam's
normalisation shrinks a huge gradient element to one ordinary step, parameter averaging
or a broadcast from rank 0 makes the replicas equal again, a flipped optimizer state or
an unused parameter may never reach the loss. So "undetected" is what a verdict says of
the run, for the user to weigh, not a finding; the oracle's finding under a flip is a
hang (docs/explanation/oracle.md).
"""

from __future__ import annotations

from chaoslight._report import PASSED, Outcome
from chaoslight._runtime import NOTE
from chaoslight._schedule import Fault, clip


def silent_notes(outcome: Outcome, fired: list[tuple[int, Fault]]) -> tuple[str, ...]:
    """One line per silent fault that fired: what it changed, and what saw it (the first
    check violated, or a rank that failed), or that nothing did."""
    changed = {
        (event.rank, event.fault): event.detail
        for event in outcome.events
        if event.kind == NOTE and event.fault and event.detail
    }
    seen = [v for v in outcome.violations if not getattr(v, "warning", False)]
    failed = [r for r in outcome.ranks if r.status != PASSED]
    notes = []
    for rank, fault in fired:
        if not fault.silent:
            continue
        what = changed.get((rank, str(fault)), "")
        head = f"{fault} on rank {rank}" + (f" ({what})" if what else "")
        if seen:
            notes.append(f"{head} was seen: {clip(str(seen[0]), 200, one_line=True)}")
        elif failed:
            notes.append(f"{head} was seen: rank {failed[0].rank} {failed[0].status}")
        else:
            notes.append(
                f"{head} went undetected: every rank finished, no check saw it (replicas "
                "in sync, every loss finite). Not a failure: correct programs can absorb a "
                "flip too (Adam, averaged or re-broadcast parameters, an unused element)"
            )
    return tuple(notes)
