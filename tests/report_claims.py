"""What a report claims, checked against the run's own record (issue 28: a report never
contradicts itself). ``contradictions(verdict, outcome)`` lists every claim of the
verdict's text that the event log does not support; a campaign's result adds its own
claims (``campaign_contradictions``)."""

from __future__ import annotations

import re
from typing import Any

from chaoslight import Outcome, Verdict
from chaoslight._runtime import FIRED

_FIRED_AT = re.compile(
    r"the injected (\S+@\S+(?: [a-z_]+=\S+)*) fired (?:at step (\d+)|outside a step)"
)
_NEVER = re.compile(r"^(\S+@\S+(?: [a-z_]+=\S+)*) never fired: ")


def _runs(outcome: Outcome) -> list[Outcome]:
    return [*outcome.attempts, outcome]


def _fired_texts(outcome: Outcome) -> set[str]:
    return {e.fault for run in _runs(outcome) for e in run.events if e.kind == FIRED}


def contradictions(verdict: Verdict, outcome: Outcome) -> list[str]:
    """Every claim of the verdict's reason, notes and accounts the record contradicts."""
    found = []
    fired = _fired_texts(outcome)
    text = "\n".join([verdict.reason, *verdict.notes, *(str(a) for a in verdict.accounts)])
    for match in _FIRED_AT.finditer(text):
        if match.group(1).rstrip(";,.)") not in fired:
            found.append(f"says {match.group(1)} fired, and no run recorded it firing")
    for note in verdict.notes:
        never = _NEVER.match(note)
        if never and never.group(1) in fired:
            found.append(f"says {never.group(1)} never fired, and it fired")
    for fault in verdict.never_fired:
        if fault in fired:
            found.append(f"lists {fault} as never fired, and it fired")
    ranks = {r.rank for run in _runs(outcome) for r in run.ranks}
    for account in verdict.accounts:
        if account.symptom.rank is not None and account.symptom.rank not in ranks:
            found.append(f"accounts for rank {account.symptom.rank}, which did not run")
    for account in verdict.accounts:
        if " hung: " in account.symptom.what and "any end but a hang" in account.why:
            found.append(f"explains a hang by a desync, which allows any end but a hang: {account}")
    if verdict.failed and verdict.known is None and not verdict.internal and not verdict.findings:
        found.append("failed as the program's, with no symptom the program owns")
    if verdict.known is not None and verdict.findings:
        found.append("called the framework's, with symptoms the program owns")
    return found


def campaign_contradictions(result: Any) -> list[str]:
    """A campaign's claims: a minimal schedule's every fault fired in its failing run; a
    delay said to pin a race fired in every replay, each of which failed."""
    found = []
    if result.verdict is None:
        return found
    if result.status == "failed" and result.verdict.never_fired:
        found.append(f"calls minimal a schedule whose {result.verdict.never_fired} never fired")
    if result.status == "flaky-without-faults" and result.schedule.faults:
        for replay in result.replays:
            if not replay.failed or replay.never_fired:
                found.append("says the delay makes it fail every time, and a replay did not")
    return found
