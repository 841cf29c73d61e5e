"""What one example run in a World did: per-rank results, merged events, evidence.

Statuses, most severe first: ``crashed`` (a rank's process died), ``hung`` (a watchdog
fired, or a rank stopped answering), ``failed`` (a rank raised), ``passed``. A rank whose
only error is a torch.distributed one raised because another rank failed, hung or died
is ``released``: it was let go, it is not the cause.
"""

from __future__ import annotations

import os
import signal
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from chaoslight._runtime._deliberate import is_deliberate
from chaoslight._runtime._events import Event
from chaoslight._runtime._evidence import OBSERVATION
from chaoslight._runtime._trace import SPAN_KINDS
from chaoslight._schedule._model import Schedule
from chaoslight._world._timeline import Header, RankEnd, Timeline, build, render_text
from chaoslight._world._timeline_html import render_html

PASSED, FAILED, HUNG, CRASHED, RELEASED = "passed", "failed", "hung", "crashed", "released"
STATUSES = (PASSED, FAILED, HUNG, CRASHED)
RANK_STATUSES = (PASSED, FAILED, RELEASED, HUNG, CRASHED)


@dataclass(frozen=True)
class ExceptionInfo:
    """An exception a rank raised, as text: its type's name (``OutOfMemoryError``), the
    module defining it (``torch``, ``builtins``), its message and formatted traceback, and
    whether chaoslight raised it on purpose (``_runtime/_deliberate.py``: the oracle tells
    its internal errors from its injections by that mark)."""

    type: str
    message: str
    traceback: str = ""
    distributed: bool = False  # a torch.distributed / gloo communication error
    module: str = "builtins"
    deliberate: bool = False

    @classmethod
    def of(cls, exc: BaseException, distributed: bool = False) -> ExceptionInfo:
        """``exc`` as text, its whole chain in the traceback, read from the object itself
        (``format_exc()`` after the ``except`` block has ended knows nothing)."""
        kind = type(exc)
        text = "".join(traceback.format_exception(kind, exc, exc.__traceback__))
        return cls(
            kind.__qualname__, str(exc), text, distributed, kind.__module__, is_deliberate(exc)
        )

    def __str__(self) -> str:
        return f"{self.type}: {self.message}" if self.message else self.type

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "message": self.message,
            "traceback": self.traceback,
            "distributed": self.distributed,
            "module": self.module,
            "deliberate": self.deliberate,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> ExceptionInfo:
        return cls(
            doc["type"],
            doc["message"],
            doc.get("traceback", ""),
            bool(doc.get("distributed")),
            doc.get("module", "builtins"),
            doc.get("deliberate") is True,
        )


@dataclass(frozen=True)
class RankResult:
    """One rank's part of an example.

    ``value`` is the target's return value when it could be pickled (``value_repr``
    always, when it returned); ``signal``/``exitcode`` say how a crashed rank died;
    ``evidence`` is one line saying where the rank was; ``stacks`` is its faulthandler
    dump when it hung; ``output`` is the tail of its stdout and stderr.
    """

    rank: int
    status: str
    exception: ExceptionInfo | None = None
    value: Any = None
    value_repr: str | None = None
    signal: int | None = None
    exitcode: int | None = None
    evidence: str = ""
    stacks: str = ""
    output: str = ""
    pid: int = 0
    ended_s: float | None = None  # when the parent heard the rank end, from the example start
    # Hung in a collective the program's own code issued (a hook's save_checkpoint, a
    # rank-conditional barrier), not one of Lightning's loops: the likely cause of a hang.
    in_own_collective: bool = False


@dataclass(frozen=True)
class Outcome:
    """The result of ``World.run``: status, per-rank results, all ranks' events by time."""

    status: str
    ranks: tuple[RankResult, ...]
    events: list[Event] = field(default_factory=list)
    wall_s: float = 0.0
    schedule: Schedule = field(default_factory=Schedule)
    target: str = ""
    timeout: float = 0.0
    violations: tuple[Any, ...] = ()  # what the checks found; any makes a pass "failed"
    attempts: tuple[Outcome, ...] = ()  # earlier runs of a schedule with restarts, in order

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    @property
    def evidence(self) -> dict[int, str]:
        """Per rank, one line: where it waited (hung), how it died, what it raised."""
        return {r.rank: r.evidence for r in self.ranks if r.evidence}

    def summary(self) -> str:
        """Status and time, then the root cause first and its consequences after."""
        lines = [cause_first(self)] if any(r.status != PASSED for r in self.ranks) else []
        lines += [str(v) for v in self.violations]
        return f"{self.status} in {self.wall_s:.2f} s" + (": " + "; ".join(lines) if lines else "")

    def report(self) -> str:
        """The summary, each rank's exception or stack, and the event log (observations,
        which checks record in bulk, and a trace's spans are counted, not printed: they
        stay in the log files and the timeline)."""
        out = [f"chaoslight World: {self.target} {self.summary()}"]
        for result in ordered_by_cause(self.ranks):
            out.append(f"  rank {result.rank}: {result.status}")
            if result.exception is not None and result.exception.traceback:
                out += ["    " + line for line in result.exception.traceback.rstrip().splitlines()]
        shown = [e for e in self.events if e.kind != OBSERVATION and e.kind not in SPAN_KINDS]
        out += ["  " + event.line() for event in shown]
        if len(shown) < len(self.events):
            hidden = len(self.events) - len(shown)
            out.append(f"  ({hidden} check observations and spans not shown)")
        return "\n".join(out)

    def timeline(self, verdict_text: str | None = None, replay_command: str = "") -> Timeline:
        """The per-rank timeline of this example (``_world/_timeline.py``)."""
        failing = any(r.status != PASSED for r in self.ranks)
        header = Header(
            self.target,
            self.status,
            verdict_text or self.summary(),
            cause_first(self) if failing else "",
            self.schedule.to_text(),
            replay_command,
            self.wall_s,
        )
        return build(header, self.events, [rank_end(r) for r in self.ranks])

    def timeline_text(self) -> str:
        """The timeline as a compact table, one column per rank (terminals, CI logs)."""
        return render_text(self.timeline())

    def to_html(
        self,
        path: str | os.PathLike[str],
        verdict_text: str | None = None,
        replay_command: str | None = None,
    ) -> Path:
        """Write the timeline as one self-contained HTML page (inline SVG and CSS, nothing
        fetched); returns its path. Spans show when the run was traced
        (``World.run(..., trace=True)``); otherwise faults and each rank's end."""
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        page = render_html(self.timeline(verdict_text, replay_command or ""))
        out.write_text(page, encoding="utf-8")
        return out

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        # Short: pytest prints the repr of an outcome in a failed assert, and the ranks'
        # tracebacks, stacks and output would fill the screen.
        return f"<Outcome {self.summary()[:300]}>"


def ordered_by_cause(ranks: tuple[RankResult, ...]) -> list[RankResult]:
    """Causes first (ranks that failed or crashed, earliest first; then hung ranks, those
    hung in a collective of the program's own first), then consequences (ranks released
    by a peer), then ranks that passed. A hung rank's end is when it was killed, which
    says nothing of the cause."""
    groups = {FAILED: 0, CRASHED: 0, HUNG: 1, RELEASED: 2}

    def key(result: RankResult) -> tuple[int, int, float, int]:
        group = groups.get(result.status, 3)
        when = result.ended_s if result.ended_s is not None else float("inf")
        if result.status == HUNG:
            return (group, 0 if result.in_own_collective else 1, 0.0, result.rank)
        return (group, 0, when, result.rank)

    return sorted(ranks, key=key)


def cause_first(outcome: Outcome, skip_rank: int | None = None) -> str:
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
    short = {
        PASSED: "returned",
        FAILED: f"raised {exc.type if exc else '?'}",
        RELEASED: f"released ({exc.type if exc else '?'})",
        HUNG: "hung",
    }.get(result.status, "crashed")
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
    return f"rank {result.rank} {verb}: {_one_line(str(result.exception))}"


def _one_line(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def settle(results: list[RankResult]) -> tuple[RankResult, ...]:
    """Mark consequential distributed errors ``released``; fill in missing evidence."""
    causes = [
        r
        for r in results
        if r.status in (HUNG, CRASHED)
        or (r.status == FAILED and r.exception is not None and not r.exception.distributed)
    ]
    settled = []
    for result in results:
        if (
            result.status == FAILED
            and result.exception is not None
            and result.exception.distributed
            and any(c.rank != result.rank for c in causes)
        ):
            result = replace(result, status=RELEASED)
        if not result.evidence:
            result = replace(result, evidence=describe(result))
        settled.append(result)
    return tuple(sorted(settled, key=lambda r: r.rank))


def overall(ranks: tuple[RankResult, ...]) -> str:
    """The example's status: the most severe of its ranks'."""
    statuses = {r.status for r in ranks}
    for status in (CRASHED, HUNG):
        if status in statuses:
            return status
    return FAILED if statuses & {FAILED, RELEASED} else PASSED
