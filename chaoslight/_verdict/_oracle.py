"""The fault-aware oracle: judge a run by what a correct program may do under exactly the
faults that fired, and account for every symptom. The rules, with their table, are in
``docs/explanation/oracle.md``; this module and ``_rules.py`` are the only places that
apply them.

A run's symptoms (each rank's end other than a return, each check's violation) are each
explained by one thing (``_accounts.py``): a fault that fired and may cause it, a known
framework issue whose signature claims it, or nothing, and then it is the program's
finding. The order matters only for what is reported:

1. The rules judge the whole run under the faults that fired (``_rules.judge_faults``).
   A run they allow is explained by its faults: no known issue is credited with it.
2. A run they fail is offered to the known issues of the release it ran. Each claims the
   symptoms its signature explains, whatever else fired (``_known.claim_known``).
3. The rules judge the rest: the run without the claimed ranks and violations (and, when
   a claimed rank ended early, without the checks the cut left unjudged). If the rest
   passes, the failure is the framework's (``Verdict.known``: reported apart, the search
   goes on); if not, the rest is the program's finding, named by its own evidence, and
   the claims are still listed (``Verdict.claims``) to be reported apart.

A schedule with restarts is judged run by run; a desync fault's damage (a flipped bit, a
replica apart) is carried into the later runs it was checkpointed into, where it is
judged as if it had fired there.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from chaoslight._report import PASSED, Outcome, overall
from chaoslight._runtime import FIRED, budget_of
from chaoslight._schedule import Severity
from chaoslight._verdict._accounts import account
from chaoslight._verdict._known import claim_known
from chaoslight._verdict._known_issue import KnownClaim
from chaoslight._verdict._result import Account, By, Rule, Symptom, Verdict
from chaoslight._verdict._rules import (
    Carried,
    fired_faults,
    internal_error,
    judge_faults,
    never_fired,
    never_fired_notes,
)

__all__ = [
    "ANY_END_RULE",
    "BENIGN_RULE",
    "FAILED_CLEANLY",
    "HANG_RULE",
    "INTERNAL_RULE",
    "NO_FAULT",
    "PREEMPT_RULE",
    "RECOVERED",
    "SWALLOWED",
    "Account",
    "By",
    "Rule",
    "Symptom",
    "Verdict",
    "fired_faults",
    "internal_error",
    "judge",
    "never_fired",
    "never_fired_notes",
]

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


def judge(outcome: Outcome) -> Verdict:
    """The verdict on one outcome (see the module). A schedule with restarts is judged
    run by run, each by the faults that fired in it and the damage earlier runs carried
    into it; the run after the last fault must pass (the restart must succeed). The
    first run with a finding of the program's is the verdict's; else the first the
    framework's known issue failed; else the job passed."""
    if not outcome.attempts:
        return _judge_run(outcome)
    runs = (*outcome.attempts, outcome)
    verdicts: list[Verdict] = []
    carried: Carried = ()
    for number, run in enumerate(runs, start=1):
        verdicts.append(_judge_run(run, carried, number))
        budget = budget_of(run.schedule)
        damage = [(r, f) for r, f in fired_faults(run) if f.fault_class(budget) == Severity.DESYNC]
        carried += tuple(damage)
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
        "claims": _unique(c for v in verdicts for c in v.claims),
        "accounts": tuple(a for v in verdicts for a in v.accounts),
    }
    program = [n for n, v in enumerate(verdicts) if v.failed and v.known is None]
    framework = [n for n, v in enumerate(verdicts) if v.failed and v.known is not None]
    for index in program[:1] or framework[:1]:
        label = f"run {index + 1} of {len(runs)}" + (" (a restart)" if index else "")
        verdict = verdicts[index]
        return replace(verdict, reason=f"{label}: {verdict.reason}", **common)
    return replace(verdicts[-1], **common)


def _trigger(text: str) -> str:
    """A fault's text without its rank and times: a restart splits a fault per rank."""
    return " ".join(w for w in text.split() if not w.startswith(("rank=", "times=")))


def _unique(claims: Iterable[KnownClaim]) -> tuple[KnownClaim, ...]:
    """One claim per issue (the first run's), in order."""
    seen: dict[str, KnownClaim] = {}
    for claim in claims:
        seen.setdefault(claim.issue.key, claim)
    return tuple(seen.values())


def _judge_run(outcome: Outcome, carried: Carried = (), number: int | None = None) -> Verdict:
    """One run's verdict (see the module), with every symptom accounted for."""
    verdict = judge_faults(outcome, carried)
    claims: list[KnownClaim] = []
    if verdict.failed and not verdict.internal:
        claims = claim_known(outcome)
    if claims:
        rest = judge_faults(_residual(outcome, claims), carried)
        if rest.failed:
            notes = tuple(_apart(claim) for claim in claims)
            verdict = replace(rest, claims=tuple(claims), notes=(*rest.notes, *notes))
        else:
            verdict = replace(verdict, known=claims[0], claims=tuple(claims))
    return replace(verdict, accounts=account(outcome, verdict, claims, carried, number))


def _residual(outcome: Outcome, claims: list[KnownClaim]) -> Outcome:
    """The run without the symptoms the claims explain: their ranks and violations. A
    claimed rank that ended early cut the run short, as a hard fault does: the checks
    that need a finished run (every violation but an ``any_end`` one) are not judged."""
    ranks = frozenset().union(*(c.claimed.ranks for c in claims))
    violations = [v for c in claims for v in c.claimed.violations]
    cut = any(r.rank in ranks and r.status != PASSED for r in outcome.ranks)
    left = tuple(r for r in outcome.ranks if r.rank not in ranks)
    kept = tuple(v for v in outcome.violations if v not in violations and (v.any_end or not cut))
    return replace(outcome, ranks=left, violations=kept, status=overall(left))


def _apart(claim: KnownClaim) -> str:
    """The note a finding of the program's carries of a known issue beside it."""
    what = []
    if claim.claimed.ranks:
        what.append("the end of rank " + ", ".join(map(str, sorted(claim.claimed.ranks))))
    if claim.claimed.violations:
        what.append(", ".join(sorted({v.check for v in claim.claimed.violations})))
    return (
        f"{claim.explains()} explains {' and '.join(what)}: reported apart; the finding "
        "above is the rest, the program's"
    )
