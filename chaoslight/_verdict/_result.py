"""A verdict as data: the rule it applied (``Rule``), every symptom of the run and what
explains it (``Symptom``, ``Account``, ``By``), and the verdict itself (``Verdict``).

The oracle (``_oracle.py``) makes verdicts; the search, the soak, the pytest plugin and
the reports read them. Nothing here judges.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chaoslight._runtime import Violation
from chaoslight._schedule import Schedule, Vocabulary
from chaoslight._verdict._known_issue import KnownClaim, KnownFinding


class Rule(Vocabulary):
    """The rule a verdict applied (``Verdict.rule``), as docs/explanation/oracle.md words
    it. A ``str``, as ``Status`` is: it equals, prints and serialises as its text."""

    NO_FAULT = "no fault fired: the run must pass and every check hold"
    BENIGN = "only benign faults fired: the run must pass and every check hold"
    FAILED_CLEANLY = "a hard fault fired and every rank ended, the faulted rank by the fault"
    RECOVERED = "a hard fault fired and every rank recovered: the checks must hold"
    HANG = "nothing may hang"
    SWALLOWED = "a hard fault's error must not be swallowed while a peer fails or waits"
    PREEMPTED = (
        "a preemption (SIGTERM) was delivered: every rank stops by itself, in time, at the same"
        " step"
    )  # judged by ``_preemption``
    INTERNAL = "an exception inside chaoslight is an internal error, not a finding"
    STALLED = (
        "a rank was frozen: its peers end, or wait where the process group's timeout bounds"
        " them, never with no deadline"
    )
    ANY_END = (
        "what must hold however a run ends (a job that tells its launcher it succeeded has"
        " finished) must hold under any fault but a desync"
    )


class By(Vocabulary):
    """What explains one symptom of a run (``Account.by``)."""

    FAULT = "a fault that fired"  # its class allows this end, on its rank, at its moment
    CONSEQUENCE = "a consequence"  # of another rank's end: released, or left waiting
    KNOWN = "a known framework issue"  # its signature claims this symptom: reported apart
    NOT_JUDGED = "not judged"  # a check a fault or a known issue cut the run short of
    PROGRAM = "the program"  # nothing explains it: the program's finding


@dataclass(frozen=True)
class Symptom:
    """One thing a run shows that a clean run does not: a rank's end other than a return
    (it failed, hung, was released, crashed), a check's violation, or, where the rule
    concerns the ranks together (a fault swallowed, ranks stopped apart), the rule's own
    finding. ``run``: the run of a restarted job (1 the first), None for a job of one."""

    what: str
    rank: int | None = None
    run: int | None = None
    violation: Violation | None = None


@dataclass(frozen=True)
class Account:
    """One symptom and the one explanation the verdict gives it."""

    symptom: Symptom
    by: By
    why: str = ""

    def __str__(self) -> str:
        where = f"run {self.symptom.run}: " if self.symptom.run is not None else ""
        why = f" ({self.why})" if self.why else ""
        return f"{where}{self.symptom.what} -- explained by {self.by}{why}"


@dataclass
class Verdict:
    """One example's result as the search sees it: failed or not, and by which rule.

    ``known`` is set when a known framework issue explains every symptom the faults do not
    (the failure is the framework's: reported apart, the search goes on); ``claims`` lists
    every known issue that claimed a symptom of the run, also beside a finding of the
    program's own; ``accounts`` says, per symptom, what explains it."""

    failed: bool
    reason: str
    status: str
    violations: list[Violation] = field(default_factory=list)
    fired: tuple[tuple[int, str], ...] = ()  # (rank, fault), sorted: ranks race in time
    rule: Rule = Rule.NO_FAULT
    internal: bool = False
    never_fired: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # for each fault that never fired: where its site ran
    known: KnownClaim | None = None
    claims: tuple[KnownClaim, ...] = ()
    accounts: tuple[Account, ...] = ()

    def signature(self) -> tuple[Any, ...]:
        """What must repeat for a failure to count as reproduced (not flaky)."""
        return (self.failed, self.internal, self.status, tuple(v.check for v in self.violations))

    @property
    def findings(self) -> tuple[Account, ...]:
        """The symptoms nothing explains: the program's (empty when it did not fail)."""
        return tuple(a for a in self.accounts if a.by == By.PROGRAM)

    def is_finding(self, strict: bool = False) -> bool:
        """Whether the run counts as a failure of the program: it failed, and not by a
        known framework issue alone (unless ``strict``, which makes those failures too)."""
        return self.failed and (self.known is None or strict)

    def known_findings(self, schedule: Schedule) -> list[KnownFinding]:
        """Each known issue that claimed a symptom of the run, met under ``schedule``:
        what it explained is the verdict's reason where it explained the whole failure,
        else the symptoms it claimed beside the program's finding."""
        found = []
        for claim in self.claims:
            if self.known is not None and self.known.issue.key == claim.issue.key:
                reason = self.reason
            else:
                symptoms = [a.symptom.what for a in self.accounts if a.by == By.KNOWN]
                reason = "; ".join(symptoms) or self.reason
            found.append(KnownFinding(claim.issue, claim.package, claim.version, schedule, reason))
        return found
