"""The checks of a World example, each judging every rank's observations and results."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from chaoslight._report import FAILED, PASSED, Outcome
from chaoslight._runtime._evidence import Evidence, RankView, Violation
from chaoslight._runtime._protocol import Rerun, check_violations
from chaoslight._schedule import Schedule


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
    folder, to run the target again or crash and restart it. The checks share the
    example's fault-free reruns (``FaultFreeRuns``).
    """
    if not checks:
        return outcome
    violations: list[Violation] = []
    evidence = evidence_of(outcome)
    fault_free = FaultFreeRuns(rerun)
    for check in checks:
        try:
            violations += check_violations(check, evidence, fault_free.rerun(), scratch)
        except Exception as exc:  # the check's own bug, named: not a verdict on the program
            name = getattr(check, "name", type(check).__name__)
            raise CheckJudgeError(
                f"check {name!r} raised while judging: {type(exc).__name__}: {exc}"
            ) from exc
    failing = [v for v in violations if not getattr(v, "warning", False)]
    status = FAILED if failing and outcome.status == PASSED else outcome.status
    return replace(outcome, status=status, violations=tuple(violations))


class FaultFreeRuns:
    """The fault-free reruns of one example, shared by the checks that judge it.

    A check with no reference of its own (a replay, a single ``World.run``) runs the
    example with the empty schedule, and every such run records every check's
    observations: its n-th fault-free rerun is the n-th any check asked for, run once.
    Each check still gets distinct runs (two references are two runs); any other rerun
    (the example's own schedule again, a crash and its restart) runs every time."""

    def __init__(self, rerun: Callable[..., Outcome]) -> None:
        self._run = rerun
        self.runs: list[Evidence] = []

    def rerun(self) -> Rerun:
        """A check's ``rerun``: its own count of the shared fault-free runs taken."""
        taken = 0

        def again(
            schedule: Schedule | None = None,
            workdir: Path | None = None,
            resume_from: str | None = None,
        ) -> Evidence:
            nonlocal taken
            if schedule is None or schedule or workdir is not None or resume_from is not None:
                return evidence_of(self._run(schedule, workdir, resume_from))
            if taken == len(self.runs):
                self.runs.append(evidence_of(self._run(Schedule())))
            taken += 1
            return self.runs[taken - 1]

        return again
