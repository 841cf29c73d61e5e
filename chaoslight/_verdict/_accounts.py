"""Every symptom of a run and the one explanation the verdict gives it.

A run's symptoms are each rank's end that is not a return (it failed, hung, was released,
crashed) and each violation of a check. The verdict accounts for each one by exactly one
explanation, in this order:

1. a known framework issue whose signature claims that symptom (``Claimed``), reported
   apart, whatever else fired;
2. a fault that fired and whose class allows it, on its rank, at its moment: the rank
   ended by its own injected error, stopped on a notice, was frozen, or a desync (this
   run's, or an earlier run's whose damage a checkpoint carried) allows any end;
3. a consequence of another rank's end: released by a transport error, left waiting in
   a collective, or failed beside a rank a hard fault ended;
4. not judged: a check of a run a fault or a known issue cut short;
5. nothing: the program's, a finding.

This module only words what the rules decided (``_rules.py``, ``_oracle.py``): a verdict
that failed has at least one symptom the program owns, and one that passed has none.
"""

from __future__ import annotations

from chaoslight._report import HUNG, PASSED, RELEASED, Outcome, RankResult
from chaoslight._runtime import Violation, budget_of
from chaoslight._schedule import Fault, Severity, clip
from chaoslight._verdict._known_issue import KnownClaim
from chaoslight._verdict._result import Account, By, Symptom, Verdict
from chaoslight._verdict._rules import Carried, ended_by_fault, fired_faults, hard_by_rank


def symptoms(outcome: Outcome, run: int | None = None) -> list[Symptom]:
    """Each rank's end other than a return, then each violation that is not a warning."""
    found = [
        Symptom(f"rank {r.rank} {r.status}: {_end(r)}", r.rank, run)
        for r in outcome.ranks
        if r.status != PASSED
    ]
    found += [
        Symptom(clip(str(v), 200, one_line=True), v.rank, run, v)
        for v in outcome.violations
        if not v.warning
    ]
    return found


def _end(result: RankResult) -> str:
    text = result.evidence or (str(result.exception) if result.exception else result.status)
    return clip(text.removeprefix(f"rank {result.rank} "), 160, one_line=True)


def account(
    outcome: Outcome,
    verdict: Verdict,
    claims: list[KnownClaim],
    carried: Carried = (),
    run: int | None = None,
) -> tuple[Account, ...]:
    """Per symptom of ``outcome``, what explains it under ``verdict``."""
    fired = [*carried, *fired_faults(outcome)]
    budget = budget_of(outcome.schedule)
    desync = next((f for _, f in fired if f.fault_class(budget) == Severity.DESYNC), None)
    hard = hard_by_rank(outcome, fired)
    ranks = {r.rank: r for r in outcome.ranks}
    program = verdict.failed and verdict.known is None and not verdict.internal
    accounts = []
    for symptom in symptoms(outcome, run):
        claim = _claim_of(symptom, claims)
        if claim is not None:
            accounts.append(Account(symptom, By.KNOWN, f"{claim.explains()}: reported apart"))
        elif symptom.violation is not None:
            accounts.append(_violation(symptom, symptom.violation, verdict, program, desync))
        else:
            result = ranks[symptom.rank] if symptom.rank is not None else None
            assert result is not None
            rule = str(verdict.rule)
            accounts.append(_rank_end(symptom, result, hard, fired, desync, program, rule))
    if verdict.failed and not any(a.by == By.PROGRAM for a in accounts):
        # The rule concerns the ranks together (an error swallowed on a rank that
        # returned, ranks that stopped apart, an internal error): its finding is the symptom.
        what = clip(verdict.reason, 300, one_line=True)
        by = By.PROGRAM if program or verdict.internal else By.KNOWN
        accounts.append(Account(Symptom(what, run=run), by, str(verdict.rule)))
    return tuple(accounts)


def _claim_of(symptom: Symptom, claims: list[KnownClaim]) -> KnownClaim | None:
    for claim in claims:
        if symptom.violation is not None and symptom.violation in claim.claimed.violations:
            return claim
        if symptom.violation is None and symptom.rank in claim.claimed.ranks:
            return claim
    return None


def _violation(
    symptom: Symptom,
    violation: Violation,
    verdict: Verdict,
    program: bool,
    desync: Fault | None,
) -> Account:
    if program and violation in verdict.violations:
        return Account(symptom, By.PROGRAM, str(verdict.rule))
    if program and desync is not None and violation.check == "no-hang":
        return Account(symptom, By.PROGRAM, str(verdict.rule))  # the one end a desync forbids
    if desync is not None:
        return Account(symptom, By.FAULT, f"the injected {desync} (a desync): only a hang counts")
    return Account(symptom, By.NOT_JUDGED, "the run was cut short: its checks are not judged")


def _rank_end(
    symptom: Symptom,
    result: RankResult,
    hard: dict[int, list[Fault]],
    fired: list[tuple[int, Fault]],
    desync: Fault | None,
    program: bool,
    rule: str,
) -> Account:
    own = hard.get(result.rank, [])
    stalled = [f for rank, f in fired if rank == result.rank and f.stalls]
    if stalled:
        return Account(symptom, By.FAULT, f"the injected {stalled[0]} froze it")
    if own and ended_by_fault(result, own):
        return Account(symptom, By.FAULT, f"the injected {own[0]} ended it")
    if desync is not None and result.status != HUNG:
        return Account(symptom, By.FAULT, f"the injected {desync} (a desync): any end but a hang")
    if desync is not None and program:
        return Account(symptom, By.PROGRAM, rule)  # hung: the one end a desync forbids
    if result.status == RELEASED:
        return Account(symptom, By.CONSEQUENCE, "a peer left it in a collective")
    if program:
        return Account(symptom, By.PROGRAM, "")
    return Account(symptom, By.CONSEQUENCE, "of a hard fault's end on another rank")
