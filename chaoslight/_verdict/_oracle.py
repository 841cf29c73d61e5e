"""The fault-aware oracle: judge a run by what a correct program may do under exactly the
faults that fired. The rules, with their table, are in ``docs/explanation/oracle.md``;
this module is the only place that applies them.

- Only **benign** faults fired (delays, a reduction reordered identically on every rank):
  the run must pass and every check must hold.
- A **hard** fault fired (OOM, a raised error, a crash, an allocation under a memory
  budget): a correct program may *fail cleanly* (every rank ends, the rank where the
  fault fired ends by it) or *recover consistently* (every rank finishes and the checks
  hold). A hang, or the error swallowed on its rank while a peer fails or waits, is a bug.
- A **desync** fault fired (a dropped collective, a per-rank reduction order, a corrupted
  result): no correct program survives it; the only requirement is that nothing hangs.
- An exception raised inside chaoslight itself is an **internal error**, never a finding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from chaoslight._report import CRASHED, FAILED, HUNG, PASSED, RELEASED, cause_first
from chaoslight._runtime import FIRED, NEVER_FIRED, Violation
from chaoslight._schedule import (
    Fault,
    InvalidSchedule,
    Vocabulary,
    clip,
    fault_from_text,
)
from chaoslight._verdict._hangs import hang_reason, mismatch_cause
from chaoslight._verdict._known import match_known
from chaoslight._verdict._known_workers import workers_cause
from chaoslight._verdict._preemption import (
    Delivery,
    by_default_action,
    deliveries,
    preemption_finding,
)
from chaoslight._verdict._severity import (
    BENIGN,
    DESYNC,
    HARD,
    SEVERITY,
    fault_class,
)
from chaoslight._verdict._silent import silent_notes
from chaoslight._verdict._stalls import stall_finding


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


NO_FAULT, BENIGN_RULE, FAILED_CLEANLY, RECOVERED = (
    Rule.NO_FAULT,
    Rule.BENIGN,
    Rule.FAILED_CLEANLY,
    Rule.RECOVERED,
)
HANG_RULE, SWALLOWED, PREEMPT_RULE, INTERNAL_RULE, ANY_END_RULE = (
    Rule.HANG,
    Rule.SWALLOWED,
    Rule.PREEMPTED,
    Rule.INTERNAL,
    Rule.ANY_END,
)

_PACKAGE = str(Path(__file__).resolve().parents[1])
_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+, in (\S+)', re.M)


@dataclass
class Verdict:
    """One example's result as the search sees it: failed or not, and by which rule."""

    failed: bool
    reason: str
    status: str
    violations: list[Violation] = field(default_factory=list)
    fired: tuple[tuple[int, str], ...] = ()  # (rank, fault), sorted: ranks race in time
    rule: Rule = NO_FAULT
    internal: bool = False
    never_fired: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # for each fault that never fired: where its site ran
    known: Any = None  # (KnownIssue, package, version) when the framework caused it

    def signature(self) -> tuple[Any, ...]:
        """What must repeat for a failure to count as reproduced (not flaky)."""
        return (self.failed, self.internal, self.status, tuple(v.check for v in self.violations))


def fired_faults(outcome: Any) -> list[tuple[int, Fault]]:
    """(rank, fault) for every firing in the run's events, in time order. A preemption
    counts once its SIGTERM was delivered (the run may end before a later notice)."""
    delivered = {(d.rank, d.fault) for d in deliveries(outcome)}
    found = []
    for event in outcome.events:
        if event.kind != FIRED:
            continue
        try:
            fault = fault_from_text(event.fault)
        except InvalidSchedule:
            continue  # an event log from another chaoslight version: judge without it
        if fault.acts_later and (event.rank, event.fault) not in delivered:
            continue
        found.append((event.rank, fault))
    return found


def never_fired(outcome: Any) -> tuple[str, ...]:
    """The schedule's faults that fired on no rank."""
    fired = {e.fault for e in outcome.events if e.kind == FIRED}
    schedule = getattr(outcome, "schedule", None) or ()
    return tuple(str(f) for f in schedule if str(f) not in fired)


def never_fired_notes(outcome: Any) -> tuple[str, ...]:
    """One line per fault that never fired: where each rank reached its site instead."""
    where: dict[str, list[str]] = {}
    for event in outcome.events:
        if event.kind == NEVER_FIRED:
            where.setdefault(event.fault, []).append(event.detail)
    lines = []
    for fault in never_fired(outcome):
        seen = "; ".join(where.get(fault, [])) or "no rank reported its site"
        why = "docs/reference/schedules.md says what a step is"
        lines.append(f"{fault} never fired: {seen} ({why})")
    return tuple(lines)


def internal_error(outcome: Any) -> str | None:
    """A rank's exception whose innermost frame is chaoslight's own and that chaoslight did
    not raise on purpose (the runtime marks what it raises on purpose: ``ExceptionInfo
    .deliberate``), if any. The innermost frame is the last of the formatted traceback:
    that of the exception the rank ended with."""
    for result in outcome.ranks:
        exc = result.exception
        if exc is None or result.status == RELEASED or exc.deliberate:
            continue
        frames = _FRAME.findall(exc.traceback or "")
        if not frames:
            continue
        filename, function = frames[-1]
        if _in_chaoslight(filename):
            return f"rank {result.rank}: {exc} (raised in chaoslight: {function})"
    return None


def _in_chaoslight(filename: str) -> bool:
    return str(Path(filename).resolve()).startswith(_PACKAGE + "/")


def judge(outcome: Any) -> Verdict:
    """The verdict on one outcome: the first rule of ``docs/explanation/oracle.md`` that applies. A
    schedule with restarts is judged run by run: each by the faults that fired in it
    (the run after the last fault must pass: the restart must succeed)."""
    attempts = getattr(outcome, "attempts", ())
    if not attempts:
        return _judge_run(outcome)
    runs = (*attempts, outcome)
    verdicts = [_judge_run(run) for run in runs]
    fired_anywhere = {_trigger(e.fault) for run in runs for e in run.events if e.kind == FIRED}
    unfired = [f for f in verdicts[-1].never_fired if _trigger(f) not in fired_anywhere]
    common: dict[str, Any] = {
        "fired": tuple(sorted({item for v in verdicts for item in v.fired})),
        "never_fired": tuple(unfired),
        "notes": tuple(
            n
            for n in verdicts[-1].notes
            if " never fired: " not in n or n.split(" never fired")[0] in unfired
        ),
    }
    for number, verdict in enumerate(verdicts, start=1):
        if verdict.failed:
            label = f"run {number} of {len(runs)}" + (" (a restart)" if number > 1 else "")
            return replace(verdict, reason=f"{label}: {verdict.reason}", **common)
    return replace(verdicts[-1], **common)


def _trigger(text: str) -> str:
    """A fault's text without its rank and times: a restart splits a fault per rank."""
    return " ".join(w for w in text.split() if not w.startswith(("rank=", "times=")))


def _judge_run(outcome: Any) -> Verdict:
    """One run's verdict; a failure (not an internal error) is matched against the known
    framework issues, each of which checks its own signature in the run's evidence."""
    verdict = _judge_one(outcome)
    if verdict.failed and not verdict.internal and verdict.known is None:
        verdict.known = match_known(outcome)
    return verdict


def _judge_one(outcome: Any) -> Verdict:
    verdict = _judge_by_faults(outcome)
    if verdict.failed or verdict.internal or verdict.rule == HANG_RULE:
        return verdict  # a desync (judged by HANG_RULE) guarantees nothing but no hang
    binding = [v for v in outcome.violations if getattr(v, "any_end", False) and not v.warning]
    if not binding:
        return verdict
    return replace(
        verdict, failed=True, reason=str(binding[0]), rule=ANY_END_RULE, violations=binding
    )


def _judge_by_faults(outcome: Any) -> Verdict:
    fired = fired_faults(outcome)
    base = {
        "status": outcome.status,
        "fired": tuple(sorted((rank, str(f)) for rank, f in fired)),
        "never_fired": never_fired(outcome),
        "notes": never_fired_notes(outcome) + silent_notes(outcome, fired),
    }
    internal = internal_error(outcome)
    if internal is not None:
        reason = f"internal error in chaoslight: {internal}"
        return Verdict(True, reason, rule=INTERNAL_RULE, internal=True, **base)
    budget = getattr(outcome.schedule, "memory_budget", None)
    worst = max((SEVERITY.index(fault_class(f, budget)) for _, f in fired), default=-1)
    if worst < 0:
        return _must_pass(outcome, NO_FAULT, base)
    if SEVERITY[worst] == BENIGN:
        return _must_pass(outcome, BENIGN_RULE, base)
    if all(f.acts_later for _, f in fired if fault_class(f, budget) != BENIGN):
        # Only notices struck (preemptions): a hang after one may be Lightning's own bug.
        return _preempted(outcome, fired, deliveries(outcome), base)
    if any(f.stalls for _, f in fired):
        return _stalled(outcome, fired, base)
    if outcome.status == HUNG:
        return Verdict(True, hang_reason(outcome, fired), rule=HANG_RULE, **base)
    if SEVERITY[worst] == DESYNC:
        return Verdict(False, "", rule=HANG_RULE, **base)
    return _hard(outcome, fired, base)


def _preempted(
    outcome: Any, fired: list[tuple[int, Fault]], delivered: list[Delivery], base: dict[str, Any]
) -> Verdict:
    """Every rank stops by itself, in time, at the same step (``_preemption``); a SIGTERM
    that met no handler ended its rank as a crash does, and is judged as one."""
    if by_default_action(delivered):
        if outcome.status == HUNG:
            return Verdict(True, hang_reason(outcome, fired), rule=HANG_RULE, **base)
        return _hard(outcome, fired, base)
    finding = preemption_finding(outcome, delivered)
    if finding is not None:
        usual = workers_cause(outcome, delivered)  # a group SIGTERM killed the workers
        reason = clip(finding, 600, one_line=True) + usual
        return Verdict(True, reason, rule=PREEMPT_RULE, **base)
    if all(r.status == PASSED for r in outcome.ranks):
        return _must_pass(outcome, PREEMPT_RULE, base)
    return Verdict(False, "", rule=PREEMPT_RULE, **base)


def _stalled(outcome: Any, fired: list[tuple[int, Fault]], base: dict[str, Any]) -> Verdict:
    """A rank frozen: its peers may end, or wait where the process group's timeout bounds
    them (``_stalls``); one that waits with no deadline is the finding. A run every rank
    finished (a short freeze) must hold every check."""
    finding = stall_finding(outcome, fired)
    if finding is not None:
        return Verdict(True, clip(finding, 900, one_line=True), rule=Rule.STALLED, **base)
    if all(r.status == PASSED for r in outcome.ranks):
        return _must_pass(outcome, RECOVERED, base)
    return Verdict(False, "", rule=Rule.STALLED, **base)


def _must_pass(outcome: Any, rule: Rule, base: dict[str, Any]) -> Verdict:
    violations = [v for v in outcome.violations if not getattr(v, "warning", False)]
    warnings = tuple(str(v) for v in outcome.violations if getattr(v, "warning", False))
    base = {**base, "notes": (*base["notes"], *warnings)}
    if any(r.status != PASSED for r in outcome.ranks):
        hung = outcome.status == HUNG
        reason = hang_reason(outcome, []) if hung else cause_first(outcome)
        usual = "" if hung else mismatch_cause(outcome)
        reason += f". Usual cause: {usual}" if usual else ""
        return Verdict(True, reason, rule=rule, violations=violations, **base)
    if violations:
        return Verdict(True, str(violations[0]), rule=rule, violations=violations, **base)
    return Verdict(False, "", rule=rule, **base)


def _hard(outcome: Any, fired: list[tuple[int, Fault]], base: dict[str, Any]) -> Verdict:
    """Under a hard fault: recovered (all passed, checks hold) or failed cleanly (every rank
    ended, each faulted rank by its own fault); else the fault was swallowed somewhere."""
    if all(r.status == PASSED for r in outcome.ranks):
        return _must_pass(outcome, RECOVERED, base)
    hard: dict[int, list[Fault]] = {}
    budget = getattr(outcome.schedule, "memory_budget", None)
    for rank, fault in fired:
        if fault_class(fault, budget) == HARD:
            hard.setdefault(rank, []).append(fault)
    explained = [r for r in outcome.ranks if _ended_by_fault(r, hard.get(r.rank, []))]
    for result in outcome.ranks:
        faults = hard.get(result.rank)
        if not faults or result in explained or _released_before_notice(result, faults, explained):
            continue
        later = result.status == FAILED  # its own error, not the injected one
        if later or not explained:
            reason = _swallowed(result, faults[0], outcome, later)
            return Verdict(True, reason, rule=SWALLOWED, **base)
    return Verdict(False, "", rule=FAILED_CLEANLY, **base)


def _released_before_notice(result: Any, faults: list[Fault], explained: list[Any]) -> bool:
    """A rank whose only hard faults are notices (a preemption's SIGTERM, acted on later)
    and that failed with a transport error while a peer ended by its own fault: the peer's
    end released it before the notice could act, as it would any correct program."""
    error = result.exception
    return (
        result.status == FAILED
        and error is not None
        and error.distributed
        and all(fault.acts_later for fault in faults)
        and any(other.rank != result.rank for other in explained)
    )


def _ended_by_fault(result: Any, faults: list[Fault]) -> bool:
    """The rank crashed, or failed with one of its injected errors (or one chained to it),
    or stopped as one of them asks (a preemption's notice). A rank that ended by *one* of
    its hard faults has swallowed none of the others: it stopped by the first that told
    it to."""
    if result.status == CRASHED:
        return True
    if result.status != FAILED or result.exception is None or not faults:
        return False
    text = f"{result.exception.traceback}\n{result.exception}"
    return any(fault.surfaced_in(text) for fault in faults)


def _swallowed(result: Any, fault: Fault, outcome: Any, later: bool) -> str:
    rest = cause_first(outcome, skip_rank=result.rank)
    if later:
        error = result.exception
        text = f"rank {result.rank} swallowed the injected {fault} and failed later: {error}"
    else:
        text = f"rank {result.rank} swallowed the injected {fault} and {result.status}"
    return clip(text, 300, one_line=True) + (f"; {rest}" if rest else "")
