"""A fuzz campaign: Hypothesis generates and shrinks schedules; chaoslight runs, replays
and minimises them.

1. Generate schedules and run each on the World until one fails (or the budget is spent).
2. Hypothesis shrinks it: fewer faults, lower ranks, earlier steps, simpler kinds.
3. A deletion pass drops any fault the failure does not need (Hypothesis can stop short).
4. The minimal schedule is replayed ``replays`` times: if any replay differs (verdict or
   the faults that fired), it is reported as **flaky**, never as a minimal failing case.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.errors import Flaky

from chaoslight._schedule._model import Schedule
from chaoslight._search._minimize import drop_redundant_faults
from chaoslight._search._property import Verdict

CLEAN, FAILED, FLAKY = "clean", "failed", "flaky"


@dataclass
class Progress:
    """Live counters of a campaign, for the display."""

    phase: str = "generating"
    examples: int = 0
    failures: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def per_minute(self) -> float:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        return self.examples * 60.0 / elapsed


@dataclass
class Result:
    """How a campaign ended: clean, a minimal failing schedule, or a flaky one."""

    status: str
    schedule: Schedule | None = None
    verdict: Verdict | None = None
    outcome: Any = None
    replays: list[Verdict] = field(default_factory=list)
    examples: int = 0
    wall_s: float = 0.0


class _Found(Exception):
    def __init__(self, schedule: Schedule, verdict: Verdict, outcome: Any) -> None:
        super().__init__(verdict.reason)
        self.schedule, self.verdict, self.outcome = schedule, verdict, outcome


Runner = Callable[[Schedule], tuple[Verdict, Any]]


@dataclass
class Campaign:
    """Search ``strategy`` with ``run`` (schedule -> verdict, outcome) as the property."""

    run: Runner
    strategy: Any
    max_examples: int = 100
    seed: int | None = None
    database: str | None = None
    key: str = ""
    replays: int = 3
    on_progress: Callable[[Progress], None] = lambda progress: None
    progress: Progress = field(default_factory=Progress)

    def execute(self) -> Result:
        started = time.monotonic()
        found = self._search()
        if found is None:
            return Result(CLEAN, examples=self.progress.examples, wall_s=time.monotonic() - started)
        schedule, first = found.schedule, found.verdict
        self._phase("minimising")
        schedule = drop_redundant_faults(schedule, lambda s: self._still_fails(s, first))
        self._phase("replaying")
        replays = [self._example(schedule)[0] for _ in range(self.replays)]
        verdict, outcome = self._example(schedule)
        status = FAILED
        if any(r.signature() != verdict.signature() or r.fired != verdict.fired for r in replays):
            status = FLAKY
        return Result(
            status,
            schedule,
            verdict,
            outcome,
            replays,
            self.progress.examples,
            time.monotonic() - started,
        )

    def _search(self) -> _Found | None:
        @settings(
            max_examples=self.max_examples,
            deadline=None,
            database=DirectoryBasedExampleDatabase(self.database) if self.database else None,
            suppress_health_check=list(HealthCheck),
            phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink),
            report_multiple_bugs=False,
            print_blob=False,
        )
        @given(schedule=self.strategy)
        def prop(schedule: Schedule) -> None:
            verdict, outcome = self._example(schedule)
            if verdict.failed:
                self.progress.failures += 1
                self._phase("shrinking")
                raise _Found(schedule, verdict, outcome)

        # Several campaigns share one database: key each by target, mode and world.
        prop._hypothesis_internal_add_digest = hashlib.sha256(self.key.encode()).digest()  # type: ignore[attr-defined]
        if self.seed is not None:
            prop = hypothesis_seed(self.seed)(prop)
        try:
            prop()
        except _Found as found:
            return found
        except Flaky as flaky:
            inner = _first_found(flaky)
            if inner is not None:
                return inner
            raise
        return None

    def _example(self, schedule: Schedule) -> tuple[Verdict, Any]:
        verdict, outcome = self.run(schedule)
        self.progress.examples += 1
        self.on_progress(self.progress)
        return verdict, outcome

    def _still_fails(self, schedule: Schedule, like: Verdict) -> bool:
        verdict, _ = self._example(schedule)
        return verdict.failed and verdict.signature() == like.signature()

    def _phase(self, phase: str) -> None:
        self.progress.phase = phase
        self.on_progress(self.progress)


def _first_found(error: BaseException) -> _Found | None:
    """Hypothesis wraps a failure that did not reproduce in Flaky: dig the first one out."""
    for inner in getattr(error, "exceptions", ()) or ():
        if isinstance(inner, _Found):
            return inner
    context = error.__context__ or error.__cause__
    return context if isinstance(context, _Found) else None
