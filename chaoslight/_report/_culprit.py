"""What a failing run's report names first, as data: the ``Culprit``.

A failure has one root cause and many consequences: a rank crashes, gloo releases its
peers with "Connection closed by peer"; a rank skips a collective, its peers wait in it.
The report (``_text.cause_first``, the verdicts built on it) names the culprit first, and
``Outcome.culprit`` gives the same as data, so a tool (``benchmarks/localization.py``)
can score it against the fault that was injected.

Which rank is the culprit: the rank where the run's first fault that can make a job fail
fired (its class is not benign: a delay or an identical reorder cannot). chaoslight
knows it injected that fault there, at that site and step, before any rank ended by it;
whatever a peer did afterwards (raised gloo's error, waited in a collective, returned
early) is its consequence. Of several such faults, the first whose rank then ended by
itself (failed, crashed, hung) comes before one whose rank recovered from it. With no
such fault: the first rank the ranks' ends put first (``ordered_by_cause``), by its own
error, its hang, or, when every failing rank was released by a peer, as a consequence.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from chaoslight._report._records import RankResult
from chaoslight._report._ridden import as_judged
from chaoslight._report._status import CRASHED, FAILED, HUNG, PASSED, RELEASED
from chaoslight._runtime._events import Event, budget_of, parse_fired
from chaoslight._schedule._kind import Severity
from chaoslight._schedule._vocabulary import Vocabulary


class Cause(Vocabulary):
    """What kind of cause the culprit is (``Culprit.cause``)."""

    FAULT = "injected fault"  # a fault chaoslight injected on that rank fired there
    ERROR = "own error"  # the rank raised or died by itself, no fault fired first
    HANG = "hung"  # it waits in a collective, and no rank failed by itself
    CONSEQUENCE = "consequence"  # released by a peer's end, and nothing else failed


@dataclass(frozen=True)
class Culprit:
    """The root cause a failing run's report names first: the rank, the kind of cause,
    and, for an injected fault, the site and step it fired at and the fault's text."""

    rank: int
    cause: Cause
    site: str | None = None
    step: int | None = None
    fault: str = ""

    def line(self) -> str:
        """``the injected crash@lightning.training_step rank=1 step=2 fired at step 2``."""
        if not self.fault:
            return ""
        when = f"at step {self.step}" if self.step is not None else "outside a step"
        return f"the injected {self.fault} fired {when}"


def find_culprit(
    ranks: Iterable[RankResult], events: Iterable[Event], schedule: Any = None
) -> Culprit | None:
    """The culprit of a run whose ranks did not all pass (None when they did); see the
    module for the rule."""
    results = list(ranks)
    if all(r.status == PASSED for r in results):
        return None
    budget = budget_of(schedule)
    seen = list(events)
    struck = [
        f.event
        for f in parse_fired(seen)
        if as_judged(f, results, seen).fault_class(budget) != Severity.BENIGN
    ]
    if struck:
        status = {r.rank: r.status for r in results}
        # Of several faults, one whose rank ended by itself (failed, crashed, hung) over
        # one whose rank recovered from it and was released by a peer, or passed.
        rank_of = {FAILED: 0, CRASHED: 0, HUNG: 0, RELEASED: 1}
        event = min(struck, key=lambda e: rank_of.get(status.get(e.rank, PASSED), 2))
        return Culprit(event.rank, Cause.FAULT, event.site, event.step, event.fault)
    first = next(r for r in ordered_by_cause(tuple(results)) if r.status != PASSED)
    causes = {FAILED: Cause.ERROR, CRASHED: Cause.ERROR, HUNG: Cause.HANG}
    return Culprit(first.rank, causes.get(first.status, Cause.CONSEQUENCE))


def ordered_by_cause(ranks: tuple[RankResult, ...], first: int | None = None) -> list[RankResult]:
    """Causes first (ranks that failed or crashed, earliest first; then hung ranks, those
    hung in a collective of the program's own first), then consequences (ranks released
    by a peer), then ranks that passed. A hung rank's end is when it was killed, which
    says nothing of the cause. ``first``: the culprit's rank, put before all."""
    groups: dict[str, int] = {FAILED: 0, CRASHED: 0, HUNG: 1, RELEASED: 2}

    def key(result: RankResult) -> tuple[int, int, int, float, int]:
        culprit = 0 if result.rank == first else 1
        group = groups.get(result.status, 3)
        when = result.ended_s if result.ended_s is not None else float("inf")
        if result.status == HUNG:
            return (culprit, group, 0 if result.in_own_collective else 1, 0.0, result.rank)
        return (culprit, group, 0, when, result.rank)

    return sorted(ranks, key=key)
