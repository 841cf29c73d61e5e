"""The oracle's rules by fault class: what a correct program may do under exactly the
faults that fired in one run (the table of ``docs/explanation/oracle.md``).

- Only **benign** faults fired (delays, a reduction reordered identically on every rank,
  a freeze its rank came back from): the run must pass and every check must hold.
- A **hard** fault fired (OOM, a raised error, a crash, an allocation under a memory
  budget): a correct program may *fail cleanly* (every rank ends, the rank where the
  fault fired ends by it) or *recover consistently* (every rank finishes and the checks
  hold). A hang, or the error swallowed on its rank while a peer fails or waits, is a bug.
- A **desync** fault fired (a dropped collective, a per-rank reduction order, a corrupted
  result), in this run or an earlier run of the job whose state it damaged: no correct
  program survives it; the only requirement is that nothing hangs.
- An exception raised inside chaoslight itself is an **internal error**, never a finding.

``judge_faults`` applies them to one run; the oracle (``_oracle.py``) calls it on the
whole run and, where a known framework issue claims some of its symptoms, on the rest.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from chaoslight._report import (
    CRASHED,
    FAILED,
    HUNG,
    PASSED,
    RELEASED,
    Outcome,
    RankResult,
    cause_first,
)
from chaoslight._report._ridden import as_judged
from chaoslight._runtime import FIRED, NEVER_FIRED, Fired, budget_of, parse_fired
from chaoslight._schedule import Fault, Severity, clip
from chaoslight._verdict._hangs import hang_reason, mismatch_cause
from chaoslight._verdict._known_frames import in_chaoslight
from chaoslight._verdict._known_workers import workers_cause
from chaoslight._verdict._preemption import (
    Delivery,
    by_default_action,
    deliveries,
    preemption_finding,
)
from chaoslight._verdict._result import Rule, Verdict
from chaoslight._verdict._silent import silent_notes
from chaoslight._verdict._stalls import stall_finding

Judged = list[tuple[int, Fault]]  # (rank, fault) as the rules judge them, in time order
Carried = tuple[tuple[int, Fault], ...]  # desync faults of earlier runs of the job
_MILDEST_FIRST = tuple(Severity)  # a run is judged by its worst fault

_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+, in (\S+)(?=\n[ \t]*(.*)|)', re.M)
# A site wrapper's call of the function it wraps (wrapt's ``wrapped``, by convention in
# ``_sites``): a patched C function (``Work.wait``, ``Tensor.item``) has no frame of its
# own, so its error's innermost frame is this call, and the error is the function's.
_PASSES_THROUGH = re.compile(r"^(return )?wrapped\(")


def counted(outcome: Outcome) -> list[Fired]:
    """The firings that count, in time order: a preemption once its SIGTERM was delivered
    (the run may end before a later notice), every other fault when it fired."""
    delivered = {(d.rank, d.fault) for d in deliveries(outcome)}
    return [
        f
        for f in parse_fired(outcome.events)
        if not f.fault.acts_later or (f.rank, f.text) in delivered
    ]


def fired_faults(outcome: Outcome) -> Judged:
    """(rank, fault) for every firing that counts (``counted``), as the rules judge it: a
    fault its rank came back from is judged as what it then amounts to (a freeze that
    ended is a delay of its length: ``as_judged``)."""
    return [(f.rank, as_judged(f, outcome.ranks, outcome.events)) for f in counted(outcome)]


def never_fired(outcome: Outcome) -> tuple[str, ...]:
    """The schedule's faults that fired on no rank."""
    fired = {e.fault for e in outcome.events if e.kind == FIRED}
    return tuple(str(f) for f in outcome.schedule if str(f) not in fired)


def never_fired_notes(outcome: Outcome) -> tuple[str, ...]:
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


def internal_error(outcome: Outcome) -> str | None:
    """A rank's exception whose innermost frame is chaoslight's own and that chaoslight did
    not raise on purpose (the runtime marks what it raises on purpose: ``ExceptionInfo
    .deliberate``), if any. The innermost frame is the last of the formatted traceback
    before the exception's own message: that of the exception the rank ended with (a
    message may quote another traceback: torch's distributed checkpoint raises on every
    rank an error that carries the failing rank's, an injected error's among them)."""
    for result in outcome.ranks:
        exc = result.exception
        if exc is None or result.status == RELEASED or exc.deliberate:
            continue
        text = exc.traceback or ""
        quoted = text.rfind(exc.message) if exc.message else -1
        frames = _FRAME.findall(text[:quoted] if quoted > 0 else text)
        if not frames:
            continue
        filename, function, line = frames[-1]
        if in_chaoslight(filename) and not _PASSES_THROUGH.match(line.strip()):
            return f"rank {result.rank}: {exc} (raised in chaoslight: {function})"
    return None


def judge_faults(outcome: Outcome, carried: Carried = ()) -> Verdict:
    """The first rule of ``docs/explanation/oracle.md`` that applies to ``outcome`` under
    the faults that fired in it, and ``carried``: desync faults of earlier runs of the
    job, whose damage a checkpoint carried into this one."""
    verdict = _judge_by_faults(outcome, list(carried))
    if verdict.failed or verdict.internal or verdict.rule == Rule.HANG:
        return verdict  # a desync (judged by Rule.HANG) guarantees nothing but no hang
    binding = [v for v in outcome.violations if v.any_end and not v.warning]
    if not binding:
        return verdict
    return replace(
        verdict, failed=True, reason=str(binding[0]), rule=Rule.ANY_END, violations=binding
    )


def _judge_by_faults(outcome: Outcome, carried: Judged) -> Verdict:
    firings = counted(outcome)
    own = fired_faults(outcome)
    fired = [*carried, *own]
    unreadable = parse_fired(outcome.events).unreadable
    unread = (
        (f"{len(unreadable)} fault(s) in the event log are not this version's: judged without",)
        if unreadable
        else ()
    )
    base: dict[str, Any] = {
        "status": outcome.status,
        "fired": tuple(sorted((f.rank, f.text) for f in firings)),
        "never_fired": never_fired(outcome),
        "notes": never_fired_notes(outcome) + silent_notes(outcome, own) + unread,
    }
    internal = internal_error(outcome)
    if internal is not None:
        reason = f"internal error in chaoslight: {internal}"
        return Verdict(True, reason, rule=Rule.INTERNAL, internal=True, **base)
    budget = budget_of(outcome.schedule)
    worst = max((_MILDEST_FIRST.index(f.fault_class(budget)) for _, f in fired), default=-1)
    if worst < 0:
        return _must_pass(outcome, Rule.NO_FAULT, base)
    if _MILDEST_FIRST[worst] == Severity.BENIGN:
        return _must_pass(outcome, Rule.BENIGN, base)
    if all(f.acts_later for _, f in fired if f.fault_class(budget) != Severity.BENIGN):
        # Only notices struck (preemptions): a hang after one may be Lightning's own bug.
        return _preempted(outcome, fired, deliveries(outcome), base)
    if any(f.stalls for _, f in fired):
        return _stalled(outcome, fired, base)
    if outcome.status == HUNG:
        return Verdict(True, hang_reason(outcome, fired), rule=Rule.HANG, **base)
    if _MILDEST_FIRST[worst] == Severity.DESYNC:
        return Verdict(False, "", rule=Rule.HANG, **base)
    return _hard(outcome, fired, base)


def _preempted(
    outcome: Outcome, fired: Judged, delivered: list[Delivery], base: dict[str, Any]
) -> Verdict:
    """Every rank stops by itself, in time, at the same step (``_preemption``); a SIGTERM
    that met no handler ended its rank as a crash does, and is judged as one."""
    if by_default_action(delivered, outcome):
        if outcome.status == HUNG:
            return Verdict(True, hang_reason(outcome, fired), rule=Rule.HANG, **base)
        return _hard(outcome, fired, base)
    finding = preemption_finding(outcome, delivered)
    if finding is not None:
        usual = workers_cause(outcome, delivered)  # a group SIGTERM killed the workers
        reason = clip(finding, 600, one_line=True) + usual
        return Verdict(True, reason, rule=Rule.PREEMPTED, **base)
    if all(r.status == PASSED for r in outcome.ranks):
        return _must_pass(outcome, Rule.PREEMPTED, base)
    return Verdict(False, "", rule=Rule.PREEMPTED, **base)


def _stalled(outcome: Outcome, fired: Judged, base: dict[str, Any]) -> Verdict:
    """A rank frozen, still when the run ended: its peers may end by a wait for it, or
    wait where the process group's timeout bounds them (``_stalls``); one that waits with
    no deadline, or failed with an error of its own, is the finding. A run every rank
    finished must hold every check."""
    finding = stall_finding(outcome, fired)
    if finding is not None:
        return Verdict(True, clip(finding, 900, one_line=True), rule=Rule.STALLED, **base)
    if all(r.status == PASSED for r in outcome.ranks):
        return _must_pass(outcome, Rule.RECOVERED, base)
    return Verdict(False, "", rule=Rule.STALLED, **base)


def _must_pass(outcome: Outcome, rule: Rule, base: dict[str, Any]) -> Verdict:
    violations = [v for v in outcome.violations if not v.warning]
    warnings = tuple(str(v) for v in outcome.violations if v.warning)
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


def hard_by_rank(outcome: Outcome, fired: Judged) -> dict[int, list[Fault]]:
    """Each rank's hard faults (benign ones cannot be swallowed)."""
    hard: dict[int, list[Fault]] = {}
    budget = budget_of(outcome.schedule)
    for rank, fault in fired:
        if fault.fault_class(budget) == Severity.HARD:
            hard.setdefault(rank, []).append(fault)
    return hard


def _hard(outcome: Outcome, fired: Judged, base: dict[str, Any]) -> Verdict:
    """Under a hard fault: recovered (all passed, checks hold) or failed cleanly (every rank
    ended, each faulted rank by its own fault); else the fault was swallowed somewhere."""
    if all(r.status == PASSED for r in outcome.ranks):
        return _must_pass(outcome, Rule.RECOVERED, base)
    hard = hard_by_rank(outcome, fired)
    explained = [r for r in outcome.ranks if ended_by_fault(r, hard.get(r.rank, []))]
    for result in outcome.ranks:
        faults = hard.get(result.rank)
        if not faults or result in explained or _released_by_peer(result, explained):
            continue
        later = result.status == FAILED  # its own error, not the injected one
        if later or not explained:
            raising = [f for f in faults if not f.raises_nothing] or faults
            reason = _swallowed(result, raising[0], outcome, later)
            return Verdict(True, reason, rule=Rule.SWALLOWED, **base)
    return Verdict(False, "", rule=Rule.FAILED_CLEANLY, **base)


def _released_by_peer(result: RankResult, explained: list[RankResult]) -> bool:
    """A rank that failed with a transport error while a peer ended by its own fault: the
    peer's end released it (gloo raises in every rank that waits on a peer gone or on a
    group it aborted), as it would any correct program. What the rank did with its own
    faults before (a notice not yet acted on; an injected error its program catches by
    design and goes on from) shows no symptom: the failure is the peer's consequence. A
    swallow that left the rank out of step is missed only where a peer's fault ended the
    run first (a false alarm is worse than a miss)."""
    error = result.exception
    return (
        result.status == FAILED
        and error is not None
        and error.distributed
        and any(other.rank != result.rank for other in explained)
    )


def ended_by_fault(result: RankResult, faults: list[Fault]) -> bool:
    """The rank crashed, or failed with one of its injected errors (or one chained to it),
    or stopped as one of them asks (a preemption's notice), or failed after faults that
    raise nothing into it (a repeated batch: its own reaction to its data). A rank that
    ended by *one* of its hard faults has swallowed none of the others: it stopped by the
    first that told it to; one that raised none of its injected errors swallowed them."""
    if result.status == CRASHED:
        return True
    if result.status != FAILED or result.exception is None or not faults:
        return False
    raising = [fault for fault in faults if not fault.raises_nothing]
    if not raising:
        return True
    text = f"{result.exception.traceback}\n{result.exception}"
    return any(fault.surfaced_in(text) for fault in raising)


def _swallowed(result: RankResult, fault: Fault, outcome: Outcome, later: bool) -> str:
    rest = cause_first(outcome, skip_rank=result.rank)
    if later:
        error = result.exception
        text = f"rank {result.rank} swallowed the injected {fault} and failed later: {error}"
    else:
        text = f"rank {result.rank} swallowed the injected {fault} and {result.status}"
    return clip(text, 300, one_line=True) + (f"; {rest}" if rest else "")
