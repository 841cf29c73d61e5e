"""Judging a World example's checks over every rank's observations and results."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from chaoslight._evidence import Evidence, RankView, Violation
from chaoslight._world._outcome import FAILED, PASSED, Outcome


def evidence_of(outcome: Outcome) -> Evidence:
    """What the checks see of an outcome: all ranks' events, how each rank ended."""
    views = {}
    for result in outcome.ranks:
        exc = result.exception
        views[result.rank] = RankView(
            result.rank,
            result.status,
            exc.type if exc else "",
            exc.message if exc else "",
            result.evidence,
        )
    return Evidence(outcome.events, views, outcome.schedule)


def judge(
    checks: list[Any], outcome: Outcome, rerun: Callable[..., Outcome], scratch: Path
) -> Outcome:
    """The outcome with its violations; checks that compare runs get their extra runs.

    ``rerun(schedule=None, workdir=None, env=None)`` runs the example again; a check with
    ``judge_restart`` gets it, with a scratch folder, to crash and restart the target.
    """
    if not checks:
        return outcome
    violations: list[Violation] = []
    for check in checks:
        runs = getattr(check, "runs", 1)
        if hasattr(check, "judge_restart"):
            violations += check.judge_restart(
                evidence_of(outcome), lambda *a, **k: evidence_of(rerun(*a, **k)), scratch
            )
        elif hasattr(check, "judge_runs") and runs > 1:
            evidences = [evidence_of(outcome)] + [evidence_of(rerun()) for _ in range(runs - 1)]
            violations += check.judge_runs(evidences)
        else:
            violations += check.judge(evidence_of(outcome))
    status = FAILED if violations and outcome.status == PASSED else outcome.status
    return replace(outcome, status=status, violations=tuple(violations))
