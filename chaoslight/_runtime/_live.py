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
them), of every armed site while memory is held (a hold is released by the first call at
its due step) or a tracer is set (it sees every call), and of a site whose calls belong
to another step than the trainer's (a batch fetched ahead: ``Behaviour.step_of``).

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
        for index, fault in candidates:
            if fault.times is not None and fired.get(index, 0) >= fault.times:
                continue  # spent
            other_rank = fault.rank is not None and fault.rank != rank
            if other_rank and not isinstance(fault, ReorderReduction):  # summed on every rank
                continue
            live.add(fault.site)
        return frozenset(live)


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
        self.calls[site] += calls
        if site in self.in_step:
            self.calls_in_step[(site, step)] += calls
        self.reached[(site, rank)] += calls
        at = (site, step)
        if at not in self._seen:
            seen = self.steps_seen.setdefault(site, [])
            if len(seen) < MAX_STEPS_SEEN:
                self._seen.add(at)
                seen.append(step)
        return self.calls[site]


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
            for site, calls in list(passed.items()):
                new = calls - counted[site]
                if new:
                    counted[site] = calls
                    counts.add(site, rank, step, new)
            if ident == me:  # only this thread adds to it: start it again, small
                passed.clear()
                counted.clear()
