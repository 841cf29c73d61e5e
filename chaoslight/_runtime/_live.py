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
schedule, and the calls that passed straight through are counted into the engine's
numbers (calls per site, per rank, per step, the steps a site ran at) at the rank and step
of the decision they passed under (``Tally``), before anything reads them (``Counts``).
Once the engine hears of every move of the step, the patches of the sites that are not
live close (``_gates.py``) and their calls are not counted at all: what ``nth`` counts is
still exact (a fault's site is live for all of its step, or for the whole run), and so is
the number a firing reports (``Counts.number``); the counts of a closed site are those of
the steps it was watched at.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from chaoslight._schedule._faults import Fault, ReorderReduction

# Steps remembered per site: what a never-fired fault's note says, and the reach a search
# records in its baseline run to draw only (site, step) points that really happen.
MAX_STEPS_SEEN = 512
# Steps a run of deferred counts holds before they are counted (``Counts.defer``).
SETTLE_AFTER = 4096

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
        return self.watched(rank, (step,), fired)

    def watched(
        self, rank: int | None, steps: tuple[int | None, ...], fired: Mapping[int, int]
    ) -> frozenset[str]:
        """The sites where a fault can fire at one of ``steps`` on ``rank`` (None: on any
        rank), and the sites always watched."""
        candidates = [*self.by_step.get(None, ())]
        for step in steps:
            if step is not None:
                candidates += self.by_step.get(step, ())
        if not candidates:
            return self.always
        live = set(self.always)
        live.update(
            fault.site for index, fault in candidates if can_fire(index, fault, rank, fired)
        )
        return frozenset(live)

    def ahead(
        self, rank: int | None, step: int | None, span: int, fired: Mapping[int, int]
    ) -> frozenset[str]:
        """The sites where a fault can fire at ``step`` or one of the ``span`` after it
        (from step 0 before training), at any step, or always watched."""
        first = 0 if step is None else step
        return self.watched(rank, tuple(range(first, first + span + 1)), fired)


def can_fire(index: int, fault: Fault, rank: int | None, fired: Mapping[int, int]) -> bool:
    """Whether schedule fault ``index`` can still fire on ``rank`` (None: on some rank): not
    spent, and for this rank or every rank (a reordered reduction is summed on every rank)."""
    if fault.times is not None and fired.get(index, 0) >= fault.times:
        return False
    return (
        rank is None
        or fault.rank is None
        or fault.rank == rank
        or isinstance(fault, ReorderReduction)
    )


def steps_that_fire(
    faults: Iterable[Indexed], rank: int | None, fired: Mapping[int, int]
) -> frozenset[int | None]:
    """The steps at which one of a site's ``faults`` can still fire on ``rank`` (None: at
    any step): a call of that site at another step cannot fire, whatever its call number."""
    return frozenset(fault.step for index, fault in faults if can_fire(index, fault, rank, fired))


class Counts:
    """The engine's counts of site calls on this rank: per site (call numbers, ``nth``),
    per (site, step) where an ``nth`` with a step needs it, per (site, rank), and the steps
    each site ran at.

    The calls that passed straight through arrive in bulk, once per step (``defer``), and
    are kept as they came until something reads the counts (``settle``): a step whose
    calls are those of the step before (a training loop's steady state) only adds its step
    to that run of steps, so an armed site that cannot fire costs no counting per step.
    The counts are read at a matched call (its call number), when a run ends and when a
    watchdog looks: each then sees every call made so far.
    """

    def __init__(self, in_step: frozenset[str]) -> None:
        self.in_step = in_step
        self._calls: Counter[str] = Counter()
        self._calls_in_step: Counter[tuple[str, int | None]] = Counter()
        self._reached: Counter[tuple[str, int]] = Counter()
        # Per site, its steps in the order first seen (a dict keeps the order, drops repeats)
        self._steps: dict[str, dict[int | None, None]] = {}
        self._steps_seen: dict[str, list[int | None]] | None = {}  # read form, None: stale
        # Not counted yet: runs of steps that passed the same calls, [rank, calls, steps],
        # and single calls of another step than the running one (a batch fetched ahead).
        self._runs: list[list[Any]] = []
        self._singles: list[tuple[str, int, int | None]] = []
        # A watchdog's thread reads the counts while the training thread defers more.
        self._lock = threading.RLock()

    @property
    def calls(self) -> Counter[str]:
        self.settle()
        return self._calls

    @property
    def calls_in_step(self) -> Counter[tuple[str, int | None]]:
        self.settle()
        return self._calls_in_step

    @property
    def reached(self) -> Counter[tuple[str, int]]:
        self.settle()
        return self._reached

    @property
    def steps_seen(self) -> dict[str, list[int | None]]:
        """Per site, the first ``MAX_STEPS_SEEN`` steps it ran at, in order."""
        self.settle()
        if self._steps_seen is None:
            self._steps_seen = {
                site: list(steps)[:MAX_STEPS_SEEN] for site, steps in self._steps.items()
            }
        return self._steps_seen

    def add(self, site: str, rank: int, step: int | None) -> int:
        """Count a call of ``site`` matched against the schedule; its call number."""
        with self._lock:
            self.settle()
            self._count(((site, 1),), rank, (step,))
            return self._calls[site]

    def number(self, site: str, step: int | None, call: int) -> int:
        """The number a firing of a fault at ``step`` reports for call number ``call``:
        what its ``nth`` counts, the call's number within ``step`` (``in_step`` sites), or
        ``call`` for a fault at any step. The engine saw every such call (the site was live
        then), whichever gates closed at other steps."""
        if step is None:
            return call
        with self._lock:
            self.settle()
            return self._calls_in_step[(site, step)]

    def defer(self, calls: frozenset[tuple[str, int]], rank: int, step: int | None) -> None:
        """Count each ``(site, calls)`` at ``rank`` and ``step`` when the counts are read."""
        with self._lock:
            runs = self._runs
            if runs:
                last = runs[-1]
                if last[1] == calls and last[0] == rank:
                    last[2].append(step)
                    if len(last[2]) >= SETTLE_AFTER:  # a long run: bounded memory
                        self.settle()
                    return
            runs.append([rank, calls, [step]])

    def defer_one(self, site: str, rank: int, step: int | None) -> None:
        """Count one call of ``site`` at ``rank`` and ``step`` when the counts are read."""
        with self._lock:
            self._singles.append((site, rank, step))

    def settle(self) -> None:
        """Count what was deferred, in the order it came."""
        with self._lock:
            self._settle()

    def _settle(self) -> None:
        if self._runs:
            runs, self._runs = self._runs, []
            for rank, calls, steps in runs:
                self._count(calls, rank, steps)
        if self._singles:
            singles, self._singles = self._singles, []
            # One pass per site and rank, its steps in the order they came.
            by_site: dict[str, list[list[Any]]] = {}
            for site, rank, step in singles:
                runs = by_site.setdefault(site, [])
                if runs and runs[-1][0] == rank:
                    runs[-1][1].append(step)
                else:
                    runs.append([rank, [step]])
            for site, runs in by_site.items():
                for rank, steps in runs:
                    self._count(((site, 1),), rank, steps)

    def _count(
        self, calls: Iterable[tuple[str, int]], rank: int, steps: list[int | None] | tuple[Any, ...]
    ) -> None:
        """Count each ``(site, calls)`` at ``rank`` once per step of ``steps``."""
        repeats = len(steps)
        totals, reached, in_step, seen = self._calls, self._reached, self.in_step, self._steps
        for site, count in calls:
            totals[site] += count * repeats
            reached[(site, rank)] += count * repeats
            if site in in_step:
                for step in steps:
                    self._calls_in_step[(site, step)] += count
            at = seen.get(site)
            if at is None:
                at = seen[site] = {}
            if len(at) < MAX_STEPS_SEEN:
                at.update(dict.fromkeys(steps))
                self._steps_seen = None


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
                if counted:  # another thread's fold counted some of it
                    items = frozenset(
                        (site, n - counted[site])
                        for site, n in passed.items()
                        if n != counted[site]
                    )
                    counted.clear()
                else:
                    items = frozenset(passed.items())
                passed.clear()
                if items:
                    counts.defer(items, rank, step)
                continue
            news = []
            for site, calls in list(passed.items()):
                new = calls - counted[site]
                if new:
                    counted[site] = calls
                    news.append((site, new))
            if news:
                counts.defer(frozenset(news), rank, step)
