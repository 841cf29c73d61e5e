"""A soak: job after job of one target under faults at exponential intervals, every run
judged, the whole soak recorded in one replayable file (``chaoslight soak``).

1. The fault-free baseline runs first: it records where the run goes (its reach) and how
   long a job lasts. A target that fails with no fault is the finding; the soak stops.
2. ``SoakPlan`` (``_soak_plan.py``) draws the jobs from the seed; each runs on the warm
   World, with its restarts, and is judged by the oracle and the checks, as ``fuzz``
   judges. A failure Lightning itself causes (a known issue) is counted apart.
3. A failure unlike the ones before it (its verdict's signature) is a finding: shrunk to
   the faults it needs (within ``SHRINK_BUDGET_S``) and replayed once on new processes
   (``World.renew``); one that does not fail again there is flaky. A failure like an
   earlier one is counted.
4. The soak ends when ``duration`` is spent (the job running then finishes), on Ctrl-C,
   or when the watchdog (``JobDeadline``) finds a run far past any bound a job can take.

The record (``SoakResult``, ``_soak_record.py``) is one failure file that holds every job.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from chaoslight._schedule import Schedule
from chaoslight._schedule._validate import check_seconds
from chaoslight._search._job import Job, make_job
from chaoslight._search._minimize import drop_redundant_faults, shorten_delays
from chaoslight._search._settings import Settings
from chaoslight._search._soak_plan import SoakPlan
from chaoslight._search._soak_record import (
    INTERRUPTED,
    STOPPED_BASELINE,
    STOPPED_INTERNAL,
    WATCHDOG,
    Finding,
    JobRecord,
    SoakResult,
)
from chaoslight._search._statuses import BASELINE, FLAKY, INTERNAL_ERROR
from chaoslight._verdict._oracle import Verdict
from chaoslight._world import World

MAX_SOAK_S = 7 * 86400.0
SHRINK_BUDGET_S = 120.0  # seconds spent shrinking one finding, past --duration if need be
# The watchdog's bound on one run: a World ends a hung rank after its progress timeout,
# so a run past this many times (timeout + job) plus the slack is chaoslight stuck.
WATCHDOG_FACTOR = 4.0
WATCHDOG_SLACK_S = 60.0


def check_soak_seconds(name: str, value: Any) -> float:
    """``--mtbf`` and ``--duration``: positive seconds, at most a week."""
    return check_seconds(name, value, MAX_SOAK_S)


@dataclass
class SoakProgress:
    """Live counters of a soak, for the display."""

    phase: str = "baseline"
    jobs: int = 0
    fired: int = 0
    findings: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


class JobDeadline:
    """The watchdog: a thread that, when one run goes past its bound, sends SIGINT to the
    thread that armed it (the soak then ends as on Ctrl-C, saying why). Only the main
    thread can be interrupted so; armed elsewhere it watches nothing. A process that
    ignores SIGINT (a script's background job does) ignores every SIGINT but the
    watchdog's while it runs: its handler raises only once a run went past its bound."""

    def __init__(self) -> None:
        self.expired = ""
        self._armed: tuple[float, str] | None = None
        self._lock = threading.Condition()
        self._owner = threading.get_ident()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._ignored: Any = None  # SIG_IGN, put back on close, when SIGINT was ignored
        if threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
                self._ignored = signal.signal(signal.SIGINT, self._interrupt_if_expired)
            self._thread = threading.Thread(target=self._watch, name="soak-watchdog", daemon=True)
            self._thread.start()

    def _interrupt_if_expired(self, signum: int, frame: Any) -> None:
        if self.expired:
            raise KeyboardInterrupt

    def arm(self, seconds: float, what: str) -> None:
        with self._lock:
            self._armed = (time.monotonic() + seconds, f"{what} ran past {seconds:g} s")
            self._lock.notify()

    def disarm(self) -> None:
        with self._lock:
            self._armed = None
            self._lock.notify()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._ignored is not None:
            signal.signal(signal.SIGINT, self._ignored)
            self._ignored = None

    def _watch(self) -> None:
        with self._lock:
            while not self._closed:
                if self._armed is None:
                    self._lock.wait()
                    continue
                deadline, why = self._armed
                left = deadline - time.monotonic()
                if left > 0:
                    self._lock.wait(left)
                    continue
                self.expired, self._armed = why, None
                signal.pthread_kill(self._owner, signal.SIGINT)


OnSoakProgress = Callable[[SoakProgress], None]


def soak(
    target: str,
    settings: Settings,
    *,
    mtbf: float,
    duration: float,
    seed: int,
    world: World | None = None,
    on_progress: OnSoakProgress = lambda progress: None,
) -> SoakResult:
    """Soak ``target`` for ``duration`` seconds, faults every ``mtbf`` seconds on average
    drawn from ``seed``, judged with ``settings``' checks: see the module docstring.
    Ctrl-C ends it with the result so far (``stopped == "interrupted"``)."""
    check_soak_seconds("mtbf", mtbf)
    check_soak_seconds("duration", duration)
    job = make_job(target, settings)
    result = SoakResult(job, seed, mtbf, duration)
    runner = _Soak(job, settings, result, on_progress)
    with World(size=job.world_size) if world is None else nullcontext(world) as warm:
        runner.world = warm
        try:
            runner.execute()
        except KeyboardInterrupt:
            result.stopped = WATCHDOG if runner.deadline.expired else INTERRUPTED
        finally:
            runner.deadline.close()
            result.elapsed_s = runner.progress.elapsed
    return result


class _Soak:
    def __init__(
        self, job: Job, settings: Settings, result: SoakResult, on_progress: OnSoakProgress
    ) -> None:
        self.job, self.settings, self.result = job, settings, result
        self.on_progress = on_progress
        self.progress = SoakProgress()
        self.deadline = JobDeadline()
        self.world: Any = None
        self._seen: dict[tuple[Any, ...], Finding] = {}

    def execute(self) -> None:
        result = self.result
        verdict, outcome = self._run(Schedule(), "the baseline run")
        result.job_seconds = outcome.wall_s
        if verdict.internal or verdict.failed:
            result.stopped = STOPPED_INTERNAL if verdict.internal else STOPPED_BASELINE
            status = INTERNAL_ERROR if verdict.internal else BASELINE
            finding = Finding(0, verdict.reason, Schedule(), status=status)
            result.findings.append(finding)
            self.progress.findings = 1
            return
        plan = SoakPlan(
            seed=result.seed,
            mtbf=result.mtbf,
            job_seconds=result.job_seconds,
            world_size=self.job.world_size,
            reach=self.job.reach.focused() if self.job.reach is not None else None,
            faults=self.settings.faults,
            steps=self.settings.steps,
        )
        # The clock starts now: the World's start, the baseline and the drawing are not
        # part of the soak's duration.
        self.progress.started = time.monotonic()
        self._phase("soaking")
        for schedule in plan.jobs():
            if self.progress.elapsed >= result.duration:
                return
            verdict, outcome = self._run(schedule, f"job {len(result.jobs)}")
            record = self._record(schedule, verdict, outcome.wall_s)
            if verdict.internal:
                result.stopped = STOPPED_INTERNAL
                index, reason = len(result.jobs) - 1, verdict.reason
                result.findings.append(Finding(index, reason, schedule, None, INTERNAL_ERROR))
                return
            if record.failed:
                self._finding(len(result.jobs) - 1, schedule, verdict)

    def _run(self, schedule: Schedule, what: str) -> tuple[Verdict, Any]:
        """One run, watched: past its bound the watchdog interrupts it."""
        per_run = WATCHDOG_FACTOR * (self.job.timeout + self.result.job_seconds)
        self.deadline.arm((schedule.restarts + 1) * per_run + WATCHDOG_SLACK_S, what)
        try:
            return self.job.run(self.world, schedule)
        finally:
            self.deadline.disarm()

    def _record(self, schedule: Schedule, verdict: Verdict, wall_s: float) -> JobRecord:
        known = ""
        if not self.settings.strict:
            for claim in verdict.claims:  # the framework's bug: counted apart, not a finding
                self.result.known[claim.issue.key] += 1
            if verdict.failed and not verdict.is_finding():
                known = verdict.known.issue.key if verdict.known is not None else ""
        fired = tuple(f"{rank}: {fault}" for rank, fault in verdict.fired)
        failed = verdict.failed and not known
        status = str(verdict.status)
        record = JobRecord(schedule, failed, status, verdict.reason, fired, known, wall_s)
        self.result.jobs.append(record)
        self.progress.jobs += 1
        self.progress.fired += len(fired)
        self.on_progress(self.progress)
        return record

    def _finding(self, index: int, schedule: Schedule, verdict: Verdict) -> None:
        signature = verdict.signature()
        if signature in self._seen:
            self._seen[signature].count += 1
            return
        finding = Finding(index, verdict.reason, schedule, signature=signature)
        self._seen[signature] = finding
        self.result.findings.append(finding)
        self.progress.findings = len(self.result.findings)
        self._phase("shrinking")
        finding.minimal = self._shrink(schedule, verdict)
        verdict_again, _ = self._replay_fresh(finding.minimal)
        if not self._programs(verdict_again) or verdict_again.signature() != signature:
            finding.status = FLAKY
        self._phase("soaking")

    def _programs(self, verdict: Verdict) -> bool:
        """The run failed, and not by a known framework issue (unless ``strict``): as the
        soak counts a job, so its shrinking and its replay count a run. A shrunk schedule
        that Lightning's own bug fails is not the program's finding made smaller."""
        return verdict.is_finding(self.settings.strict)

    def _shrink(self, schedule: Schedule, first: Verdict) -> Schedule:
        """The faults that fired, then only those the failure needs, delays shortened,
        then the fewest restarts: each step kept only if it still fails the same way."""
        stop = time.monotonic() + SHRINK_BUDGET_S
        restarts = schedule.restarts

        def fails(candidate: Schedule, again: int | None = None) -> bool:
            if time.monotonic() >= stop:
                return False
            again = restarts if again is None else again
            trial = Schedule(
                candidate.faults, memory_budget=candidate.memory_budget, restarts=again
            )
            verdict, _ = self._run(trial, "a shrinking run")
            return self._programs(verdict) and verdict.signature() == first.signature()

        fired = Schedule(
            [f for f in schedule if str(f) not in first.never_fired],
            memory_budget=schedule.memory_budget,  # the faults may need their budget
            restarts=restarts,
        )
        current = (
            fired if fired.faults and len(fired) < len(schedule) and fails(fired) else schedule
        )
        current = shorten_delays(drop_redundant_faults(current, fails), fails)
        fewest = next((n for n in range(restarts) if fails(current, n)), restarts)
        return Schedule(current.faults, memory_budget=current.memory_budget, restarts=fewest)

    def _replay_fresh(self, schedule: Schedule) -> tuple[Verdict, Any]:
        """The shrunk schedule once more on new processes and directories (``World.renew``)."""
        self.world.renew()
        return self._run(schedule, "the finding's replay")

    def _phase(self, phase: str) -> None:
        self.progress.phase = phase
        self.on_progress(self.progress)
