"""The checks of a World example, each judging every rank's observations and results."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from chaoslight._report import FAILED, PASSED, Outcome
from chaoslight._runtime._evidence import Evidence, RankView, Violation
from chaoslight._runtime._protocol import check_violations


class CheckJudgeError(RuntimeError):
    """A check's judge raised: a bug in that check, never a finding about the program."""


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
            result.exit_status,
        )
    earlier = tuple(evidence_of(run) for run in outcome.attempts)
    return Evidence(outcome.events, views, outcome.schedule, outcome.target, earlier)


def apply_checks(
    checks: list[Any], outcome: Outcome, rerun: Callable[..., Outcome], scratch: Path
) -> Outcome:
    """The outcome with its violations; checks that compare runs get their extra runs.

    ``rerun(schedule=None, workdir=None, resume_from=None)`` runs the example again; a
    check with ``judge_reruns`` (the runtime's check protocol) gets it, with a scratch
    folder, to run the target again or crash and restart it.
    """
    if not checks:
        return outcome
    violations: list[Violation] = []
    evidence = evidence_of(outcome)
    for check in checks:
        try:
            violations += check_violations(
                check, evidence, lambda *a, **k: evidence_of(rerun(*a, **k)), scratch
            )
        except Exception as exc:  # the check's own bug, named: not a verdict on the program
            name = getattr(check, "name", type(check).__name__)
            raise CheckJudgeError(
                f"check {name!r} raised while judging: {type(exc).__name__}: {exc}"
            ) from exc
    failing = [v for v in violations if not getattr(v, "warning", False)]
    status = FAILED if failing and outcome.status == PASSED else outcome.status
    return replace(outcome, status=status, violations=tuple(violations))
