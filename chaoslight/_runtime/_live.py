"""Which sites can fire now, decided per process and re-decided only when that can change.

A site is *live* while a fault of the schedule can still fire there: a fault for this
rank (or for every rank; a reordered reduction is summed on every rank), not yet spent
(``times``), whose step is this step or any step. Every other call of an armed site passes
straight to the wrapped function (``Engine.call``): a set lookup, a look at a clock, and a
count kept for the report. Which sites are live changes only when the rank
or the step does (the clock, read at every call that passes through: the trainer's step
counter and the default process group), when a fault is spent or memory held (after a
firing), when a trainer or a tracer comes; the engine decides again then, and only then.

Always matched: the calls of the sites a check or the World observes (a watchdog reads
them), and of every armed site while memory is held (a hold is released by the first call
at its due step) or a tracer is set (it sees every call). A call that belongs to another
step than the trainer's (a batch fetched ahead: ``Behaviour.step_of``) is matched when a
fault of its site can fire at that step (``steps_that_fire``), else counted there.

Decisions never change what fires: each call that is matched is matched against the whole
schedule, and the calls that passed straight through are counted into
the engine's numbers (calls per site, per rank, per step, the steps a site ran at) before
any decision, at the rank and step of the decision they passed under (``Tally``), so call
numbers, reports and never-fired notes read as they did when every armed call went
through the engine.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping

from chaoslight._schedule._faults import Fault, ReorderReduction

# Steps remembered per site: what a never-fired fault's note says, and the reach a search
# records in its baseline run to draw only (site, step) points that really happen.
MAX_STEPS_SEEN = 512

Indexed = tuple[int, Fault]


class Liveness:
    """The schedule's faults (those of this run, with their index), by step, to decide
    quickly which sites are live at a rank and step."""

    def __init__(self, faults: Iterable[Indexed], always: frozenset[str]) -> None:
        self.always = always
        self.by_step: dict[int | None, list[Indexed]] = {}
        for index, fault in faults:
            self.by_step.setdefault(fault.step, []).append((index, fault))

    def decide(self, rank: int, step: int | None, fired: Mapping[int, int]) -> frozenset[str]:
        """The sites where a fault can fire at ``rank`` and ``step``, given the firings so far."""
        live = set(self.always)
        candidates = self.by_step.get(None, [])
        if step is not None:
            candidates = candidates + self.by_step.get(step, [])
        live.update(
            fault.site for index, fault in candidates if can_fire(index, fault, rank, fired)
        )
        return frozenset(live)


def can_fire(index: int, fault: Fault, rank: int, fired: Mapping[int, int]) -> bool:
    """Whether schedule fault ``index`` can still fire on ``rank``: not spent, and for this
    rank or every rank (a reordered reduction is summed on every rank)."""
    if fault.times is not None and fired.get(index, 0) >= fault.times:
        return False
    return fault.rank is None or fault.rank == rank or isinstance(fault, ReorderReduction)


def steps_that_fire(
    faults: Iterable[Indexed], rank: int, fired: Mapping[int, int]
) -> frozenset[int | None]:
    """The steps at which one of a site's ``faults`` can still fire on ``rank`` (None: at
    any step): a call of that site at another step cannot fire, whatever its call number."""
    return frozenset(fault.step for index, fault in faults if can_fire(index, fault, rank, fired))


class Counts:
    """The engine's counts of site calls on this rank: per site (call numbers, ``nth``),
    per (site, step) where an ``nth`` with a step needs it, per (site, rank), and the steps
    each site ran at."""

    def __init__(self, in_step: frozenset[str]) -> None:
        self.in_step = in_step
        self.calls: Counter[str] = Counter()
        self.calls_in_step: Counter[tuple[str, int | None]] = Counter()
        self.reached: Counter[tuple[str, int]] = Counter()
        self.steps_seen: dict[str, list[int | None]] = {}
        self._seen: set[tuple[str, int | None]] = set()  # (site, step) in ``steps_seen``

    def add(self, site: str, rank: int, step: int | None, calls: int = 1) -> int:
        """Count ``calls`` calls of ``site``; the call number of the last."""
        self.add_all(((site, calls),), rank, step)
        return self.calls[site]

    def add_all(self, calls: Iterable[tuple[str, int]], rank: int, step: int | None) -> None:
        """Count each ``(site, calls)``, all at ``rank`` and ``step``: one pass, since the
        engine folds every site that passed through at each step boundary."""
        totals, reached, in_step, seen_at = self.calls, self.reached, self.in_step, self._seen
        for site, count in calls:
            totals[site] += count
            if site in in_step:
                self.calls_in_step[(site, step)] += count
            reached[(site, rank)] += count
            at = (site, step)
            if at not in seen_at:
                seen = self.steps_seen.setdefault(site, [])
                if len(seen) < MAX_STEPS_SEEN:
                    seen_at.add(at)
                    seen.append(step)


class Tally:
    """Calls that passed straight through, per thread, until the engine counts them.

    A thread adds only to its own counter (``passed``), so no lock is taken on the way
    through. ``fold`` runs under the engine's lock: it empties the folding thread's own
    counter (that thread is not adding meanwhile), and only reads another thread's,
    remembering how much of each site it has counted, so a call that thread adds
    meanwhile is counted next time.
    """

    def __init__(self) -> None:
        # (thread ident, passed, counted): what the thread added, what was counted of it
        self._threads: list[tuple[int, Counter[str], Counter[str]]] = []

    def counter(self) -> Counter[str]:
        """A new counter for the calling thread to add its calls to."""
        passed: Counter[str] = Counter()
        self._threads.append((threading.get_ident(), passed, Counter()))
        return passed

    def fold(self, counts: Counts, rank: int, step: int | None) -> None:
        """Count what passed through since the last fold as calls at ``rank`` and ``step``."""
        me = threading.get_ident()
        for ident, passed, counted in list(self._threads):
            if not passed:
                continue
            if ident == me:  # only this thread adds to it: count it all, start it again
                items = list(passed.items())
                passed.clear()
                if counted:  # another thread's fold counted some of it
                    items = [(s, n - counted[s]) for s, n in items if n != counted[s]]
                    counted.clear()
                counts.add_all(items, rank, step)
                continue
            news = []
            for site, calls in list(passed.items()):
                new = calls - counted[site]
                if new:
                    counted[site] = calls
                    news.append((site, new))
            counts.add_all(news, rank, step)
