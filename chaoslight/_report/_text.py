"""A run in words: the root cause first and its consequences after, one rank's line, the
text report of an example, and how each rank's lane of the timeline ends."""

from __future__ import annotations

import signal
from typing import Any, Protocol

from chaoslight._report._records import RankResult
from chaoslight._report._status import CRASHED, FAILED, HUNG, PASSED, RELEASED
from chaoslight._report._timeline import RankEnd
from chaoslight._runtime._events import Event
from chaoslight._runtime._evidence import OBSERVATION
from chaoslight._runtime._trace import SPAN_KINDS
from chaoslight._schedule._clip import clip


class ExampleRecord(Protocol):
    """What the text reads of an example (``_report/_outcome.Outcome`` has it)."""

    @property
    def status(self) -> str: ...
    @property
    def ranks(self) -> tuple[RankResult, ...]: ...
    @property
    def events(self) -> list[Event]: ...
    @property
    def wall_s(self) -> float: ...
    @property
    def target(self) -> str: ...
    @property
    def violations(self) -> tuple[Any, ...]: ...


def summary(outcome: ExampleRecord) -> str:
    """Status and time, then the root cause first and its consequences after."""
    lines = [cause_first(outcome)] if any(r.status != PASSED for r in outcome.ranks) else []
    lines += [str(v) for v in outcome.violations]
    text = f"{outcome.status} in {outcome.wall_s:.2f} s"
    return text + (": " + "; ".join(lines) if lines else "")


def report(outcome: ExampleRecord) -> str:
    """The summary, each rank's exception or stack, and the event log (observations, which
    checks record in bulk, and a trace's spans are counted, not printed: they stay in the
    log files and the timeline)."""
    out = [f"chaoslight World: {outcome.target} {summary(outcome)}"]
    for result in ordered_by_cause(outcome.ranks):
        out.append(f"  rank {result.rank}: {result.status}")
        if result.exception is not None and result.exception.traceback:
            out += ["    " + line for line in result.exception.traceback.rstrip().splitlines()]
    shown = [e for e in outcome.events if e.kind != OBSERVATION and e.kind not in SPAN_KINDS]
    out += ["  " + event.line() for event in shown]
    if len(shown) < len(outcome.events):
        hidden = len(outcome.events) - len(shown)
        out.append(f"  ({hidden} check observations and spans not shown)")
    return "\n".join(out)


def ordered_by_cause(ranks: tuple[RankResult, ...]) -> list[RankResult]:
    """Causes first (ranks that failed or crashed, earliest first; then hung ranks, those
    hung in a collective of the program's own first), then consequences (ranks released
    by a peer), then ranks that passed. A hung rank's end is when it was killed, which
    says nothing of the cause."""
    groups: dict[str, int] = {FAILED: 0, CRASHED: 0, HUNG: 1, RELEASED: 2}

    def key(result: RankResult) -> tuple[int, int, float, int]:
        group = groups.get(result.status, 3)
        when = result.ended_s if result.ended_s is not None else float("inf")
        if result.status == HUNG:
            return (group, 0 if result.in_own_collective else 1, 0.0, result.rank)
        return (group, 0, when, result.rank)

    return sorted(ranks, key=key)


def cause_first(outcome: ExampleRecord, skip_rank: int | None = None) -> str:
    """One line: the first rank that failed and why, then consequences, marked as such."""
    parts = []
    for result in ordered_by_cause(outcome.ranks):
        if result.status == PASSED or result.rank == skip_rank:
            continue
        line = result.evidence or describe(result)
        parts.append(f"consequence: {line}" if result.status == RELEASED else line)
    return "; ".join(parts)


def rank_end(result: RankResult) -> RankEnd:
    """How a rank's lane of the timeline ends: a short label and the evidence line."""
    exc = result.exception
    labels: dict[str, str] = {
        PASSED: "returned",
        FAILED: f"raised {exc.type if exc else '?'}",
        RELEASED: f"released ({exc.type if exc else '?'})",
        HUNG: "hung",
    }
    short = labels.get(result.status, "crashed")
    if result.status == CRASHED:
        short = (
            f"crashed: {signal_name(result.signal)}"
            if result.signal
            else f"crashed: exit {result.exitcode}"
        )
    text = exc.traceback if exc is not None and exc.traceback else ""
    if result.stacks:
        text += ("\n" if text else "") + result.stacks
    return RankEnd(result.rank, result.status, short, result.evidence or describe(result), text)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def describe(result: RankResult) -> str:
    """The default evidence line for a rank that did not hang."""
    if result.status == PASSED:
        return f"rank {result.rank} returned {result.value_repr or 'None'}"[:200]
    if result.status == CRASHED:
        how = (
            f"killed by {signal_name(result.signal)}"
            if result.signal
            else f"exited with code {result.exitcode}"
        )
        return f"rank {result.rank} crashed: {how}"
    verb = "was released" if result.status == RELEASED else "raised"
    return f"rank {result.rank} {verb}: {clip(str(result.exception), 200, one_line=True)}"
