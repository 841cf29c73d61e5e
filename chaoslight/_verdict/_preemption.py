"""The oracle's rule for a preemption (``docs/explanation/oracle.md``).

A scheduler's SIGTERM is a notice, not a kill: every rank of a correct program stops
**by itself**, within the timeout, **at the same step** -- it raises Lightning's
``SIGTERMException``, or saves and returns from ``fit``. None hangs, none is left in a
collective its peers never enter, none ends with a transport error because a peer left
(on gloo a peer that exits shows as a ``RuntimeError``; on NCCL the same program hangs).

A SIGTERM that reached a rank with no handler installed (before ``fit`` installs
Lightning's, or after it restores the old ones) ended it by the default action, as a
crash does: that run is judged by the crash rule (every rank ends in time).
"""

from __future__ import annotations

import signal

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
from chaoslight._runtime import NOTE
from chaoslight._runtime._preempt import DEFAULT, STOPPED, Delivery, sigterm_deliveries

NCCL_NOTE = "on NCCL a rank whose peer left waits instead: the same run hangs on GPUs"
STOP_EXCEPTIONS = ("SIGTERMException", "SystemExit")  # stopping by itself, as an error


def deliveries(outcome: Outcome) -> list[Delivery]:
    """The SIGTERMs delivered in the run, in time order (``sigterm_deliveries``)."""
    return sigterm_deliveries(outcome.events)


def stopping_steps(outcome: Outcome) -> dict[int, int | None]:
    """Per rank, the last training step it ran (from the engine's closing note)."""
    steps: dict[int, int | None] = {}
    for event in outcome.events:
        if event.kind == NOTE and event.detail.startswith(STOPPED):
            steps[event.rank] = event.step
    return steps


def by_default_action(delivered: list[Delivery], outcome: Outcome) -> bool:
    """Some SIGTERM found no handler: that rank died as a crashed one does. Either the
    delivery saw none, or the rank it reached died of SIGTERM itself: the handler seen when
    the signal was sent was gone when it arrived (``fit`` had ended and put back the
    handlers it found, the default action among them)."""
    if any(d.handler == DEFAULT for d in delivered):
        return True
    reached = {d.rank for d in delivered}
    return any(
        r.rank in reached and r.status == CRASHED and r.signal == signal.SIGTERM
        for r in outcome.ranks
    )


def preemption_finding(outcome: Outcome, delivered: list[Delivery]) -> str | None:
    """Why the run breaks the preemption rule, or None when every rank stopped well."""
    when = _when(delivered)
    if outcome.status == HUNG:
        return f"{when}, the job did not stop: {cause_first(outcome)}"
    for result in outcome.ranks:
        if result.status == RELEASED:
            return (
                f"{when}, rank {result.rank} ended with a transport error because a peer "
                f"left it in a collective ({NCCL_NOTE}): {cause_first(outcome)}"
            )
        if result.status == FAILED and not _stopped_by_itself(result):
            return f"{when}, rank {result.rank} did not stop cleanly: {result.evidence}"
        if result.status not in (PASSED, FAILED):
            return f"{when}: {cause_first(outcome)}"
    present = {r.rank for r in outcome.ranks}  # a known issue's claimed ranks are not
    steps = {rank: step for rank, step in stopping_steps(outcome).items() if rank in present}
    if len(set(steps.values())) > 1:
        where = ", ".join(f"rank {rank} after step {step}" for rank, step in sorted(steps.items()))
        return f"{when}, the ranks stopped at different steps: {where}"
    return None


def _stopped_by_itself(result: RankResult) -> bool:
    exc = result.exception
    return exc is not None and exc.type in STOP_EXCEPTIONS


def _when(delivered: list[Delivery]) -> str:
    first = delivered[0]
    ranks = sorted({d.rank for d in delivered})
    to = f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))
    return f"after SIGTERM reached {to} (first at step {first.step}, handled by {first.handler})"
