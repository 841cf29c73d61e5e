"""A soak's record: every job with its verdict, the findings, and how the soak ended.

The record is a failure file whose headline is the first finding's shrunk schedule (for
a clean soak the job that fired the most faults), with the soak under ``"soak"``: its
seed, MTBF, job length, the findings, and every job's schedule and verdict, in order.
``chaoslight replay FILE`` runs each finding (``soak_failures``), or the headline of a
clean soak; ``replay_soak`` runs every job again and says which verdicts differ.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from chaoslight._runtime._events import read_fault
from chaoslight._schedule import Schedule
from chaoslight._schedule._errors import InvalidSchedule
from chaoslight._search._failure import Failure, check_specs
from chaoslight._search._job import Job, make_job
from chaoslight._search._settings import Settings
from chaoslight._search._statuses import BASELINE, CLEAN, FOUND, INTERNAL_ERROR
from chaoslight._verdict._oracle import Verdict
from chaoslight._world import World

SOAK_VERSION = 1
# How a soak ended (``SoakResult.stopped``).
DURATION, INTERRUPTED, WATCHDOG, STOPPED_BASELINE, STOPPED_INTERNAL = (
    "duration",
    "interrupted",
    "watchdog",
    "baseline",
    "internal-error",
)


@dataclass(frozen=True)
class JobRecord:
    """One job of the soak: its schedule and how it was judged."""

    schedule: Schedule
    failed: bool
    status: str
    reason: str = ""
    fired: tuple[str, ...] = ()  # each firing, "rank: fault"
    known: str = ""  # the known framework issue that explains its failure, if one does
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "schedule": self.schedule.to_dict(),
            "failed": self.failed,
            "status": self.status,
            "reason": self.reason,
            "fired": list(self.fired),
            "known": self.known,
            "wall_s": round(self.wall_s, 3),
        }

    @classmethod
    def from_dict(cls, doc: Any) -> JobRecord:
        if not isinstance(doc, dict) or "schedule" not in doc:
            raise InvalidSchedule("each job of a soak file is an object with a 'schedule'")
        fired = doc.get("fired", [])
        return cls(
            Schedule.from_dict(doc["schedule"]),
            bool(doc.get("failed", False)),
            str(doc.get("status", "")),
            str(doc.get("reason", "")),
            tuple(str(item) for item in fired) if isinstance(fired, list) else (),
            str(doc.get("known", "")),
        )


@dataclass
class Finding:
    """A failure unlike the soak's earlier ones: the job that first showed it, how many
    jobs did, and the schedule shrunk to the faults it needs."""

    job: int
    reason: str
    schedule: Schedule
    minimal: Schedule | None = None  # None: not shrunk (out of time, or a baseline failure)
    status: str = FOUND  # FOUND, FLAKY (not reproduced in a fresh World) or BASELINE
    count: int = 1
    signature: tuple[Any, ...] = field(default=(), repr=False)

    def to_dict(self) -> dict[str, Any]:
        doc = {"job": self.job, "count": self.count, "status": self.status}
        doc |= {"reason": self.reason, "schedule": self.schedule.to_dict()}
        if self.minimal is not None:
            doc["minimal"] = self.minimal.to_dict()
        return doc

    @property
    def best(self) -> Schedule:
        return self.minimal if self.minimal is not None else self.schedule


@dataclass
class SoakResult:
    """The whole soak: how it was drawn, every job, the findings, how it ended."""

    job: Job
    seed: int
    mtbf: float
    duration: float
    job_seconds: float = 0.0
    jobs: list[JobRecord] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    known: Counter[str] = field(default_factory=Counter)
    stopped: str = DURATION
    elapsed_s: float = 0.0

    @property
    def failed(self) -> bool:
        """A finding reproduced (or a target that fails with no fault)."""
        return any(finding.status in (FOUND, BASELINE) for finding in self.findings)

    def faults_by_kind(self) -> Counter[str]:
        """How many times each kind fired, over every job (each rank's firing counts)."""
        kinds: Counter[str] = Counter()
        for record in self.jobs:
            for firing in record.fired:
                kinds[_kind_of(firing.partition(": ")[2])] += 1
        return kinds

    def headline(self) -> Failure:
        """The failure file's own schedule: the first finding's best schedule, else the
        job that fired the most faults (the hardest the program came through)."""
        if self.findings:
            first = self.findings[0]
            schedule, reason, status = first.best, first.reason, first.status
        else:
            most = max(self.jobs, key=lambda r: len(r.fired), default=None)
            schedule = most.schedule if most is not None else Schedule()
            reason, status = "", CLEAN
        if self.stopped == STOPPED_INTERNAL:
            status = INTERNAL_ERROR
        job = self.job
        specs = check_specs(job.checks)
        return Failure(schedule, job.target, job.world_size, job.timeout, specs, reason, status)

    def to_dict(self) -> dict[str, Any]:
        doc = json.loads(self.headline().to_json())
        doc["soak"] = {
            "version": SOAK_VERSION,
            "seed": self.seed,
            "mtbf": self.mtbf,
            "duration": self.duration,
            "job_seconds": round(self.job_seconds, 3),
            "elapsed_s": round(self.elapsed_s, 1),
            "stopped": self.stopped,
            "known": dict(self.known),
            "findings": [finding.to_dict() for finding in self.findings],
            "jobs": [record.to_dict() for record in self.jobs],
        }
        return doc

    def save(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")


def _kind_of(fault_text: str) -> str:
    fault = read_fault(fault_text)
    return fault.kind if fault is not None else fault_text.partition("@")[0] or "?"


def load_soak(path: str | Path) -> tuple[Failure, dict[str, Any], list[JobRecord]]:
    """A soak file: its headline failure, its soak section and its jobs."""
    failure = Failure.load(path)
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    section = doc.get("soak") if isinstance(doc, dict) else None
    if not isinstance(section, dict) or not isinstance(section.get("jobs"), list):
        raise InvalidSchedule(f"{str(path)!r} is a failure file but not a soak's record")
    return failure, section, [JobRecord.from_dict(item) for item in section["jobs"]]


def soak_failures(path: str | Path) -> list[Failure] | None:
    """One failure per finding of a soak file, in order: the finding's shrunk schedule (or
    its job's, when it was not shrunk), its reason and status, with the file's target,
    world size, timeout and checks; None when the file holds no soak."""
    failure = Failure.load(path)  # a plain schedule file (text or JSON) is no soak
    text = Path(path).read_text(encoding="utf-8")
    doc = json.loads(text) if '"chaoslight_failure"' in text else None
    section = doc.get("soak") if isinstance(doc, dict) else None
    if not isinstance(section, dict):
        return None
    findings = section.get("findings", [])
    if not isinstance(findings, list):
        raise InvalidSchedule(f"{str(path)!r}: the soak's 'findings' must be a list")
    return [_finding_failure(failure, index, item) for index, item in enumerate(findings)]


def _finding_failure(failure: Failure, index: int, doc: Any) -> Failure:
    if not isinstance(doc, dict) or "schedule" not in doc:
        raise InvalidSchedule(f"finding {index + 1} of a soak file is an object with a 'schedule'")
    schedule = Schedule.from_dict(doc.get("minimal", doc["schedule"]))
    reason, status = (str(doc.get(key, "")) for key in ("reason", "status"))
    return replace(failure, schedule=schedule, reason=reason, status=status or FOUND)


@dataclass(frozen=True)
class JobReplay:
    """One job run again: its record and the verdict now."""

    index: int
    record: JobRecord
    verdict: Verdict

    @property
    def failed(self) -> bool:
        """Failed now, a known framework issue aside (as the soak counted it)."""
        return self.verdict.failed and self.verdict.known is None

    @property
    def differs(self) -> bool:
        return self.failed != self.record.failed


def replay_soak(
    path: str | Path,
    *,
    target: str | None = None,
    checks: Any = None,
    world: World | None = None,
    on_job: Callable[[JobReplay], None] = lambda replayed: None,
) -> list[JobReplay]:
    """Run every job of a soak file again, in order, on one World, judged as the soak
    judged them (its checks, world size and timeout); ``on_job`` sees each as it ends."""
    failure, _, records = load_soak(path)
    chosen = failure.build_checks() if checks is None else checks
    settings = Settings(world_size=failure.world_size, timeout=failure.timeout, checks=chosen)
    job = make_job(target or failure.target, settings)
    replayed = []
    with World(size=job.world_size) if world is None else nullcontext(world) as warm:
        for index, record in enumerate(records):
            verdict, _ = job.run(warm, record.schedule)
            replayed.append(JobReplay(index, record, verdict))
            on_job(replayed[-1])
    return replayed
