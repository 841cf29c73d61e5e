"""A run in words: the root cause first and its consequences after, one rank's line, the
text report of an example, and how each rank's lane of the timeline ends."""

from __future__ import annotations

import signal
from typing import Any, Protocol

from chaoslight._report._culprit import find_culprit, ordered_by_cause
from chaoslight._report._records import RankResult
from chaoslight._report._status import CRASHED, FAILED, HUNG, PASSED, RELEASED
from chaoslight._report._timeline import RankEnd
from chaoslight._runtime._events import FIRED, Event, read_fault
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


def cause_first(outcome: ExampleRecord, skip_rank: int | None = None) -> str:
    """One line: the culprit first (``_culprit``: the rank an injected fault that can
    fail a job fired on, with its site and step, even when that rank returned), then the
    other ranks that failed, consequences marked as such."""
    culprit = find_culprit(outcome.ranks, outcome.events, getattr(outcome, "schedule", None))
    first = culprit.rank if culprit is not None else None
    parts = []
    for result in ordered_by_cause(outcome.ranks, first):
        if result.rank == skip_rank or (result.status == PASSED and result.rank != first):
            continue
        line = result.evidence or describe(result)
        injected = culprit is not None and result.rank == first and bool(culprit.fault)
        if injected and culprit is not None and culprit.fault not in line:
            # Where and when it struck, in the culprit's first clause: a hung rank's
            # evidence goes on about its peers' positions.
            if "; " in line:
                parts.append(f"rank {first}: {culprit.line()}")
            else:
                line += f" ({culprit.line()})"
        consequence = result.status == RELEASED and not injected
        parts.append(f"consequence: {line}" if consequence else line)
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


def signal_words(number: int) -> str:
    """``SIGSEGV (signal 11)``: the name a reader knows and the number a launcher prints."""
    name = signal_name(number)
    return name if name.startswith("signal ") else f"{name} (signal {number})"


# What a dying process prints that says why: gloo's C++ abort, Python's fatal error.
FATAL_MARKERS = ("what():", "Fatal Python error")


def death_line(rank: int, code: int | None, output: str, events: list[Event]) -> str:
    """How a rank that died reads, cause first: ``rank 1 died of SIGSEGV (signal 11): the
    injected crash@... fired at step 3`` when the fault that fired last on it ends its
    process by that signal; else what fired before the death, and the fatal message it
    printed (gloo's ``what():``, Python's fatal error). ``code`` is the process's return
    code: -N for signal N."""
    if code is None:
        text = f"rank {rank} died"
    elif code < 0:
        text = f"rank {rank} died of {signal_words(-code)}"
    else:
        text = f"rank {rank} crashed: exited with code {code}"
    fired = [e for e in events if e.rank == rank and e.kind == FIRED]
    if fired:
        last = fired[-1]
        step = "" if last.step is None else f" at step {last.step}"
        killer = _kills_with(last.fault)
        if code is not None and killer is not None and killer == -code:
            text += f": the injected {last.fault} fired{step}"
        else:
            text += f" after {last.fault} fired{step}"
    for marker in FATAL_MARKERS:
        hits = [line.strip() for line in output.splitlines() if marker in line]
        if hits:
            return text + f"; its output says: {hits[-1][:240]}"
    return text


def _kills_with(fault_text: str) -> int | None:
    """The signal the fault written ``fault_text`` ends its process with, if any."""
    fault = read_fault(fault_text)
    return None if fault is None else fault.kills_with()  # None: only say what fired


def describe(result: RankResult) -> str:
    """The default evidence line for a rank that did not hang."""
    if result.status == PASSED:
        return f"rank {result.rank} returned {result.value_repr or 'None'}"[:200]
    if result.status == CRASHED:
        code = -result.signal if result.signal else result.exitcode
        return death_line(result.rank, code, result.output or "", [])
    verb = "was released" if result.status == RELEASED else "raised"
    return f"rank {result.rank} {verb}: {clip(str(result.exception), 200, one_line=True)}"
