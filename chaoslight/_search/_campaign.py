"""A fuzz campaign: Hypothesis generates and shrinks schedules; chaoslight runs, replays
and minimises them.

0. The empty schedule runs first, twice: a target that fails with no fault injected is
   reported as such (``BASELINE``), with its own error, instead of blaming some fault.
   When it fails in some of its runs only (``FLAKY_BASELINE``), that is the program's own
   race: a finding with its rate, and the benign probes (a straggler at each of the
   user's hooks) are tried for one that makes it fail every time, to replay it exactly.
1. Generate schedules and run each on the World until one fails (or the budget is spent).
   A failure whose cause is inside chaoslight stops the campaign as ``INTERNAL_ERROR``.
2. Hypothesis shrinks it: fewer faults, lower ranks, earlier steps, simpler kinds.
3. Faults that never fired are dropped, then a deletion pass drops any fault the failure
   does not need (Hypothesis can stop short): every fault left is needed.
4. The minimal schedule is replayed ``replays`` times, the first on new processes and
   directories (``World.renew``): if any replay differs (verdict or the faults that
   fired), it is reported as **flaky**, never as a minimal failing case.
5. The result goes to ``on_result`` (the CLI writes the failure file there) and only then
   to the shared database: a database that fails is a warning, never a lost result.

With a shared database, step 1 starts with the failures earlier campaigns stored, within
``max_time``, and with a ``shard`` only those in this worker's part of the space
(``_database.in_shard``): N workers on a program with N bugs in different parts report N
different bugs. One that no longer fails is passed over; one that still fails is this
shard's bug, still there: it is minimised and reported again.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, Phase, event, given, reject, settings, target
from hypothesis import seed as hypothesis_seed
from hypothesis.database import ExampleDatabase
from hypothesis.errors import Flaky, Unsatisfiable
from hypothesis.strategies import SearchStrategy

from chaoslight._schedule import Schedule, Severity
from chaoslight._search._database import in_shard, known_failures, open_database, remember
from chaoslight._search._minimize import drop_redundant_faults, gentlest, shorten_delays
from chaoslight._search._settings import Settings, with_keywords
from chaoslight._search._statuses import (
    BASELINE,
    CLEAN,
    FLAKY,
    FLAKY_BASELINE,
    FOUND,
    INTERNAL_ERROR,
    CampaignPhase,
    CampaignStatus,
    Progress,
    Result,
)
from chaoslight._verdict._known import KnownFinding
from chaoslight._verdict._oracle import Verdict

MAX_SHRINK_RUNS = 300  # runs after the first failure: shrinking's own bound
MAX_RACE_PROBES = 12  # stragglers tried to pin a race the empty schedule shows sometimes


class _Found(Exception):
    def __init__(self, schedule: Schedule, verdict: Verdict, outcome: Any) -> None:
        super().__init__(verdict.reason)
        self.schedule, self.verdict, self.outcome = schedule, verdict, outcome


# run(schedule, fresh) -> (verdict, outcome); fresh=True runs it in a new World.
Runner = Callable[[Schedule, bool], tuple[Verdict, Any]]


class Campaign:
    """Search ``strategy`` with ``run`` (schedule -> verdict, outcome) as the property,
    under ``settings`` (its budget, seed, replays, database, shard, strictness; keywords
    that name a setting are laid over it, as ``fuzz`` does).

    ``key`` names this campaign's part of the database; ``probes`` builds the schedules
    tried first, after the baseline; ``on_progress`` sees the counters, ``on_result`` the
    result before the database records it, ``on_warning`` what went wrong beside it."""

    def __init__(
        self,
        run: Runner,
        strategy: Any,
        settings: Settings | None = None,
        *,
        key: str = "",
        probes: Callable[[], list[Schedule]] | None = None,
        on_progress: Callable[[Progress], None] = lambda progress: None,
        on_result: Callable[[Result], None] = lambda result: None,
        on_warning: Callable[[str], None] | None = None,
        max_shrinks: int = MAX_SHRINK_RUNS,
        **keywords: Any,
    ) -> None:
        self.run = run
        self.strategy = strategy
        self.settings = with_keywords(settings, keywords, "Campaign")
        self.key = key
        self.probes = probes
        self.on_progress = on_progress
        self.on_result = on_result
        self.on_warning = on_warning or (lambda line: _warn(line))  # _warn's stacklevel
        self.max_shrinks = max_shrinks
        self.progress = Progress()
        self.tried: list[Schedule] = []
        self.known: dict[str, KnownFinding] = {}
        self._failing: dict[str, tuple[Verdict, Any]] = {}
        self._found: dict[str, _Found] = {}  # the search's failures, by schedule text
        self._started = time.monotonic()
        self._first_failure_at: int | None = None
        self._db: ExampleDatabase | None = None
        self._db_opened = False

    def __repr__(self) -> str:
        return f"Campaign(key={self.key!r}, {self.settings!r})"

    def execute(self) -> Result:
        """Baseline, search, shrink, minimise, replay, report: see the module docstring."""
        result = self._execute()
        if result.schedule is None:
            return result
        try:
            self.on_result(result)  # e.g. the failure file: before any database write
        finally:
            if result.status in (FOUND, FLAKY, FLAKY_BASELINE) and result.schedule.faults:
                self._remember(result.schedule)
        return result

    def _execute(self) -> Result:
        started = self._started = time.monotonic()
        self._phase(CampaignPhase.BASELINE)
        runs = [self._example(Schedule()) for _ in range(2)]  # twice: is it deterministic?
        failing = [run for run in runs if run[0].failed]
        if failing:
            verdict, outcome = failing[0]
            other = runs[1] if failing[0] is runs[0] else runs[0]
            return self._finish(BASELINE, Schedule(), verdict, outcome, started, [other[0]])
        # The database's failures, the probes, then the search.
        self._phase(CampaignPhase.GENERATING)
        found = self._known_failure() or self._probe() or self._search()
        if found is None:
            wall = time.monotonic() - started
            return Result(
                CLEAN,
                examples=self.progress.examples,
                wall_s=wall,
                tried=self.tried,
                known=list(self.known.values()),
            )
        if found.verdict.internal:
            return self._finish(
                INTERNAL_ERROR, found.schedule, found.verdict, found.outcome, started
            )
        self.progress.failures = 1  # found by a probe or the database, or by the search
        self._phase(CampaignPhase.MINIMISING)
        self._failing[found.schedule.to_text()] = (found.verdict, found.outcome)
        schedule = self._minimise(found.schedule, found.verdict)
        verdict, outcome = self._failing[schedule.to_text()]  # its failing run, not a new one
        # A fault that never fired in the failing run is not needed by the failure, yet the
        # failure did not repeat without it: the run's timing, not its faults, decided.
        status = FLAKY if verdict.never_fired else FOUND
        return self._finish(status, schedule, verdict, outcome, started)

    def _finish(
        self,
        status: CampaignStatus,
        schedule: Schedule,
        verdict: Verdict,
        outcome: Any,
        started: float,
        seen: list[Verdict] | None = None,
    ) -> Result:
        """Replay the failure (the first replay in a fresh World); differing replays: flaky."""
        self._phase(CampaignPhase.REPLAYING)
        replays = list(seen or [])
        for index in range(self.settings.replays):
            if self.out_of_time():
                break  # the best result so far; it says how many replays it had
            replays.append(self._example(schedule, fresh=index == 0)[0])
        differs = any(
            r.signature() != verdict.signature() or r.fired != verdict.fired for r in replays
        )
        rate = None
        if status == BASELINE:  # the first baseline failure, its twin and the replays
            rate = (1 + sum(r.failed for r in replays), 1 + len(replays))
        if differs and status == BASELINE:
            # The program's own race: a finding. A delay that makes it fail every time
            # becomes the schedule (a replay then fails exactly); its replays come after
            # the empty schedule's, which give the rate.
            status = FLAKY_BASELINE
            pinned = self._pin_race(verdict)
            if pinned is not None:
                # What the report says of it ("makes it fail every time") is what these
                # replays showed; the empty schedule's replays are in the rate.
                schedule, verdict, outcome, replays = pinned
        elif differs and status == FOUND:
            status = FLAKY
        return Result(
            status,
            schedule,
            verdict,
            outcome,
            replays,
            self.progress.examples,
            time.monotonic() - started,
            self.tried,
            known=list(self.known.values()),
            no_fault_rate=rate,
        )

    def _pin_race(self, like: Verdict) -> tuple[Schedule, Verdict, Any, list[Verdict]] | None:
        """A benign probe (a straggler at one of the user's hooks) under which the failure
        the empty schedule showed in some runs happens in every run: the delay lies inside
        the race and decides it. None when none does within the campaign's time."""
        benign = [
            probe
            for probe in (self.probes() if self.probes is not None else [])
            if probe.faults and all(f.fault_class() == Severity.BENIGN for f in probe)
        ]
        for probe in benign[:MAX_RACE_PROBES]:
            if self.out_of_time():
                return None
            verdict, outcome = self._example(probe)
            if not _pins(verdict, like):
                continue
            replays = [self._example(probe)[0] for _ in range(max(self.settings.replays, 1))]
            if all(_pins(r, like) for r in replays):
                return probe, verdict, outcome, replays
        return None

    def _minimise(self, schedule: Schedule, first: Verdict) -> Schedule:
        """Drop the faults that never fired, then every fault the failure does not need,
        then shorten each delay to the smallest grid point that still fails. A fault is
        kept only where the failure needs it *and* it fired: a schedule whose failing run
        has a fault that never fired is not minimal (``_execute`` reports it flaky)."""
        fired = [f for f in schedule if str(f) not in first.never_fired]
        if len(fired) < len(schedule):
            smaller = Schedule(
                fired, memory_budget=schedule.memory_budget, restarts=schedule.restarts
            )
            if fired and self._still_fails(smaller, first):
                schedule = smaller
        schedule = drop_redundant_faults(schedule, lambda s: self._still_fails(s, first))
        gentle = gentlest(schedule, self._fails_at_all)  # its own failure, maybe another's
        if gentle is not schedule:
            schedule, first = gentle, self._failing[gentle.to_text()][0]
        return shorten_delays(schedule, lambda s: self._still_fails(s, first))

    def _probe(self) -> _Found | None:
        """The probes (long stragglers at the user's hooks) before the random search."""
        for schedule in self.probes() if self.probes is not None else []:
            if self.out_of_time():
                return None
            verdict, outcome = self._example(schedule)
            if verdict.failed:
                return _Found(schedule, verdict, outcome)
        return None

    def _search(self) -> _Found | None:
        if self.out_of_time():
            return None  # spent on the stored failures or the probes: no search to start

        @settings(
            max_examples=self.settings.max_examples,
            deadline=None,
            database=self._database(),
            suppress_health_check=list(HealthCheck),
            phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink),
            report_multiple_bugs=False,
            print_blob=False,
        )
        @given(schedule=self._strategy())
        def prop(schedule: Schedule) -> None:
            if self.out_of_time() or self._shrinks_spent():
                known = self._found.get(schedule.to_text())
                if known is not None:
                    raise known  # Hypothesis's last replay of its best failure: as it was
                reject()  # no more runs: Hypothesis ends with the best failure so far
            for fault in schedule:
                event(f"{fault.kind}@{fault.site}")
            verdict, outcome = self._example(schedule)
            _observe(verdict, outcome)
            if verdict.failed:
                self.progress.failures = 1
                if self._first_failure_at is None:
                    self._first_failure_at = self.progress.examples
                self._phase(CampaignPhase.SHRINKING)
                found = self._found[schedule.to_text()] = _Found(schedule, verdict, outcome)
                raise found

        if self.settings.seed is not None:
            prop = hypothesis_seed(self.settings.seed)(prop)
        try:
            prop()
        except _Found as found:
            return found
        except Unsatisfiable:
            return None  # every example was rejected: out of time before the search began
        except Flaky as flaky:
            inner = _first_found(flaky) or self._best_found()
            if inner is not None:
                return inner
            raise
        return None

    def _best_found(self) -> _Found | None:
        """The simplest failure the search saw (Hypothesis's order: shortest text first)."""
        if not self._found:
            return None
        return self._found[min(self._found, key=lambda text: (len(text), text))]

    def _database(self) -> ExampleDatabase | None:
        """This campaign's part of the shared database (keyed by target, world size and
        checks: campaigns replay only their own failures), opened once; None when there is
        none, or when it could not be opened (a warning said so)."""
        if not self._db_opened:
            self._db_opened = True
            self._db = open_database(self.settings.database, self.key, self.on_warning)
        return self._db

    def _known_failure(self) -> _Found | None:
        """Replay the failures earlier campaigns reported (``_database``) in this worker's
        shard, within the campaign's time."""
        for schedule in known_failures(self._database()):
            if self.out_of_time():
                return None
            if not in_shard(schedule, self.settings.shard):
                continue  # another worker's part of the space: that worker replays it
            verdict, outcome = self._example(schedule)
            if verdict.failed:
                return _Found(schedule, verdict, outcome)
        return None

    def _remember(self, schedule: Schedule) -> None:
        remember(self._database(), schedule)

    def _example(self, schedule: Schedule, fresh: bool = False) -> tuple[Verdict, Any]:
        self.tried.append(schedule)
        verdict, outcome = self.run(schedule, fresh)
        if not self.settings.strict:
            # The framework's bug, not the program's: reported apart, once; the search
            # goes on as if the symptoms it claimed were not there, to find the program's
            # own failures (a run it alone failed counts as passed).
            for finding in verdict.known_findings(schedule):
                self.known.setdefault(finding.issue.key, finding)
            if verdict.failed and not verdict.is_finding():
                verdict = replace(verdict, failed=False)
        self.progress.examples += 1
        self.on_progress(self.progress)
        return verdict, outcome

    def _fails_at_all(self, schedule: Schedule) -> bool:
        """The schedule fails the program (however), every fault of it fired."""
        if self.out_of_time():
            return False
        verdict, outcome = self._example(schedule)
        fails = verdict.failed and not verdict.never_fired
        if fails:
            self._failing[schedule.to_text()] = (verdict, outcome)
        return fails

    def _still_fails(self, schedule: Schedule, like: Verdict) -> bool:
        if self.out_of_time():
            return False  # keep what we have: the campaign's time is spent
        verdict, outcome = self._example(schedule)
        fails = verdict.failed and verdict.signature() == like.signature()
        if fails:
            self._failing[schedule.to_text()] = (verdict, outcome)
        return fails

    def out_of_time(self) -> bool:
        bound = self.settings.max_time
        return bound is not None and time.monotonic() - self._started >= bound

    def _shrinks_spent(self) -> bool:
        first = self._first_failure_at
        return first is not None and self.progress.examples - first >= self.max_shrinks

    def _strategy(self) -> Any:
        """The strategy, or, when given a function, what it builds now (after the baseline
        recorded the run's reach)."""
        if callable(self.strategy) and not isinstance(self.strategy, SearchStrategy):
            return self.strategy()
        return self.strategy

    def _phase(self, phase: CampaignPhase) -> None:
        self.progress.phase = phase
        self.on_progress(self.progress)


def _warn(line: str) -> None:
    """A campaign run from Python says what went wrong beside it as a warning."""
    warnings.warn(line, RuntimeWarning, stacklevel=3)


def _pins(verdict: Verdict, like: Verdict) -> bool:
    """A run under a probe fails as ``like`` did and every fault of the probe fired in it:
    only then does the probe's delay decide the race (one that never fired decides
    nothing, however often the race happens to fail)."""
    return verdict.failed and verdict.signature() == like.signature() and not verdict.never_fired


def _first_found(error: BaseException) -> _Found | None:
    """Hypothesis wraps a failure that did not reproduce in Flaky: dig the first one out."""
    for inner in getattr(error, "exceptions", ()) or ():
        if isinstance(inner, _Found):
            return inner
    context = error.__context__ or error.__cause__
    return context if isinstance(context, _Found) else None


def _observe(verdict: Verdict, outcome: Any) -> None:
    """What Hypothesis's statistics and observability lines (``HYPOTHESIS_EXPERIMENTAL_
    OBSERVABILITY=1``) record of one run: the verdict, each rank's status, the run's time."""
    event("verdict", "failed" if verdict.failed else "passed")
    for claim in verdict.claims:
        event("known issue", claim.issue.key)  # the framework's bug, set apart
    for result in getattr(outcome, "ranks", []):
        event(f"rank {result.rank}", result.status)
    if hasattr(outcome, "wall_s"):
        target(float(outcome.wall_s), label="seconds the run took")
