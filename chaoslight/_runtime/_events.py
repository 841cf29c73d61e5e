"""The event log: what fired where, on which rank, at which step, and when."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

from chaoslight._schedule import Fault, InvalidArgument, MemoryBudget, Vocabulary, fault_from_text


class EventKind(Vocabulary):
    """What an event records (its ``kind``, as the JSON-lines log spells it)."""

    FIRED = "fired"  # a fault fired
    SURFACED = "surfaced"  # a deferred OOM raised at a sync point
    FREED = "released"  # an Allocate hold given back (not a rank's status)
    NOTE = "note"  # something the judge should know (a delivered notice, skipped lines)
    NEVER_FIRED = "unfired"  # a scheduled fault that never fired on this rank, and why
    OBSERVATION = "observation"  # what a check's observer recorded
    ENTER = "enter"  # a traced site call began (``inject(trace=True)``)
    EXIT = "exit"  # ... and ended


FIRED, SURFACED, FREED, NOTE, NEVER_FIRED = (
    EventKind.FIRED,
    EventKind.SURFACED,
    EventKind.FREED,
    EventKind.NOTE,
    EventKind.NEVER_FIRED,
)


@dataclass(frozen=True)
class Event:
    """One thing that happened. ``time`` is ``time.monotonic()`` (shared by the processes
    of one machine), ``wall`` is ``time.time()`` for merging logs across machines."""

    kind: str
    site: str
    rank: int
    step: int | None
    time: float
    wall: float
    fault: str = ""
    # The call's number on this rank: for a firing, what the fault's ``nth`` counts
    # (within its step, for a fault at a step); for a span, within the run.
    call: int = 0
    detail: str = ""
    pid: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Event:
        return cls(**doc)

    def line(self) -> str:
        step = "-" if self.step is None else str(self.step)
        text = f"rank {self.rank} step {step:>3} {self.kind:<8} {self.fault or self.site}"
        if self.call:
            text += f" (call #{self.call})"
        return text + (f": {self.detail}" if self.detail else "")


@dataclass(frozen=True)
class Fired:
    """One firing read from an event log: the fault as an object, where and when."""

    rank: int
    fault: Fault
    event: Event

    @property
    def step(self) -> int | None:
        return self.event.step

    @property
    def text(self) -> str:
        return self.event.fault


@dataclass(frozen=True)
class FiredFaults:
    """Every firing of an event log, in its order, and the fault texts it could not read.

    The one policy for a fault text this version cannot read (a log written by another
    chaoslight version): it is left out of ``fired`` and counted in ``unreadable``, so
    whoever judges the run says so once (the verdict notes it) instead of guessing what
    the fault did. Every reader of "which faults fired" goes through ``parse_fired``."""

    fired: tuple[Fired, ...] = ()
    unreadable: tuple[str, ...] = ()

    def __iter__(self) -> Any:
        return iter(self.fired)

    def __len__(self) -> int:
        return len(self.fired)


def parse_fired(events: Iterable[Event]) -> FiredFaults:
    """The faults that fired in ``events`` (kind ``fired``), parsed once each."""
    fired: list[Fired] = []
    unreadable: list[str] = []
    for event in events:
        if event.kind != FIRED:
            continue
        fault = read_fault(event.fault)
        if fault is None:
            unreadable.append(event.fault)
        else:
            fired.append(Fired(event.rank, fault, event))
    return FiredFaults(tuple(fired), tuple(unreadable))


@lru_cache(maxsize=4096)
def read_fault(text: str) -> Fault | None:
    """A fault's text from an event log as an object, or None where this version cannot
    read it (``FiredFaults``'s policy). Faults are frozen: one object serves every reader."""
    try:
        return fault_from_text(text)
    except InvalidArgument:
        return None


def budget_of(schedule: Any) -> MemoryBudget | None:
    """The memory budget of a run's schedule (None: no budget, or no schedule)."""
    return getattr(schedule, "memory_budget", None)


# What appends an event to a log: ``Engine.record(kind, site, rank, step, fault, call=0,
# detail="")``, as the tracer and the preemption notices are given it.
Record = Callable[..., None]


def merge(events: Iterable[Event]) -> list[Event]:
    """Events from several ranks, ordered by time (then rank, for equal times)."""
    return sorted(events, key=lambda e: (e.wall, e.time, e.rank))


def to_jsonl(events: Iterable[Event]) -> str:
    return "".join(json.dumps(e.to_dict()) + "\n" for e in events)


def from_jsonl(text: str) -> list[Event]:
    return [Event.from_dict(json.loads(line)) for line in text.splitlines() if line.strip()]


@dataclass(frozen=True)
class EventLog:
    """One process's event log as read: its events, and the lines that were not events.

    ``truncated`` (0 or 1) is a last line cut short: the process was killed while it
    wrote (a rank SIGKILLed by a crash fault or by the World), which is expected.
    ``malformed`` counts every other line that is not an event, which is not expected:
    whoever reads the log says so (it is never dropped silently)."""

    events: tuple[Event, ...] = ()
    truncated: int = 0
    malformed: int = 0


def read_event_log(path: str | os.PathLike[str]) -> EventLog:
    """The event log at ``path`` (an ``events_file`` of ``inject``); a missing file is an
    empty log (the process recorded nothing). Every event is written as one whole line
    ending in a newline, so only the text after the last newline can be cut short."""
    try:
        with open(path, "rb") as file:
            text = file.read().decode("utf-8", errors="replace")  # a cut may split a character
    except FileNotFoundError:
        return EventLog()
    events: list[Event] = []
    truncated = malformed = 0
    lines = text.split("\n")
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            events.append(Event.from_dict(json.loads(line)))
        except (ValueError, TypeError):
            if number == len(lines) - 1:  # no newline after it: cut short
                truncated += 1
            else:
                malformed += 1
    return EventLog(tuple(events), truncated, malformed)


def render_report(
    events: list[Event],
    reached: Counter[tuple[str, int]],
    unwatched: frozenset[str] = frozenset(),
) -> str:
    """Text report: every event, then how often each armed site was reached per rank (of
    an ``unwatched`` site, only its calls where one of its faults could fire)."""
    lines = ["chaoslight: " + _summary(events)]
    lines += ["  " + event.line() for event in events]
    counted = sorted((key, n) for key, n in reached.items() if key[0] not in unwatched)
    if counted:
        lines.append("sites reached (calls per rank):")
        lines += [f"  {site} rank {rank}: {count}" for (site, rank), count in counted]
    if unwatched:
        lines.append(
            "not counted where none of their faults could fire (chaoslight does not watch "
            "them there): " + ", ".join(sorted(unwatched))
        )
    return "\n".join(lines)


def _summary(events: list[Event]) -> str:
    fired = sum(1 for e in events if e.kind == FIRED)
    text = f"{fired} fault firing{'s' if fired != 1 else ''}"
    unfired = {e.fault for e in events if e.kind == NEVER_FIRED}
    if unfired:
        text += f"; {len(unfired)} fault{'s' if len(unfired) != 1 else ''} never fired (below)"
    return text
