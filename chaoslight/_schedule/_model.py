"""Schedules: an ordered, immutable collection of faults, with JSON and text forms."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaoslight._schedule._budget import MemoryBudget
from chaoslight._schedule._errors import InvalidArgument, InvalidSchedule, short_repr
from chaoslight._schedule._faults import Fault
from chaoslight._schedule._textform import (
    check_fault_count,
    fault_from_dict,
    fault_to_dict,
    indexed,
    schedule_from_text,
    schedule_to_text,
    wrap,
)
from chaoslight._schedule._validate import (
    MAX_RESTARTS,
    check_bounded_int,
    check_runs_fit,
    parse_json,
    read_text_file,
)

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Schedule:
    """An ordered, immutable collection of faults: exactly what fires where and when.

    ``Schedule()`` is valid and injects nothing. ``str(schedule)`` is the text form,
    one fault per line, that reports print and ``Schedule.parse`` reads back.

    ``restarts=N`` (up to ``MAX_RESTARTS``) runs the job again, in the same working
    directory, after a run that did not pass (crashed, killed, preempted), as a cluster
    requeues a job; each fault fires in the first run that reaches its trigger, so
    ``crash@... step=3`` and ``crash@... step=7`` with ``restarts=2`` are two
    crash-and-restart cycles (text form: a line ``restarts 2``). A fault's ``run`` binds
    it to one run (``run=2``: only while the restarted job resumes) or to each run
    (``run="every"``); a run past the last restart is refused.
    """

    faults: tuple[Fault, ...] = ()
    memory_budget: MemoryBudget | None = None
    restarts: int = 0

    def __init__(
        self,
        faults: Iterable[Fault] = (),
        memory_budget: MemoryBudget | None = None,
        restarts: int = 0,
    ) -> None:
        if isinstance(faults, Fault):
            faults = (faults,)
        items = _fault_items(faults)
        check_fault_count(len(items))
        for index, fault in enumerate(items):
            if not isinstance(fault, Fault):
                raise InvalidSchedule(
                    f"faults[{index}]={fault!r} is not a fault; use chaoslight.Delay, OOM, ..."
                )
        if memory_budget is not None and not isinstance(memory_budget, MemoryBudget):
            raise InvalidSchedule(f"memory_budget={memory_budget!r} must be a MemoryBudget")
        object.__setattr__(self, "faults", items)
        object.__setattr__(self, "memory_budget", memory_budget)
        why = "each restart is one more whole run of the job"
        object.__setattr__(
            self, "restarts", check_bounded_int("restarts", restarts, 0, MAX_RESTARTS, why)
        )
        try:
            check_runs_fit(items, self.restarts)
        except InvalidArgument as exc:
            raise InvalidSchedule(str(exc)) from None

    def __iter__(self) -> Iterator[Fault]:
        return iter(self.faults)

    def __len__(self) -> int:
        return len(self.faults)

    def __bool__(self) -> bool:
        return bool(self.faults) or self.memory_budget is not None or self.restarts > 0

    def __str__(self) -> str:
        return self.to_text()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """How Hypothesis prints a schedule (its observability lines, falsifying examples):
        the text form, which ``Schedule.parse`` reads back."""
        printer.text(f"Schedule.parse({self.to_text()!r})")

    @property
    def sites(self) -> frozenset[str]:
        return frozenset(fault.site for fault in self.faults)

    # -- JSON ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "chaoslight_schedule": SCHEMA_VERSION,
            "faults": [fault_to_dict(f) for f in self.faults],
        }
        if self.restarts:
            doc["restarts"] = self.restarts
        if self.memory_budget is not None:
            doc["memory_budget"] = {
                "limit_bytes": self.memory_budget.limit_bytes,
                "min_tracked_bytes": self.memory_budget.min_tracked_bytes,
            }
        return doc

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, doc: Any) -> Schedule:
        if not isinstance(doc, dict):
            raise InvalidSchedule(f"a schedule must be a JSON object, not {type(doc).__name__}")
        version = doc.get("chaoslight_schedule")
        if version != SCHEMA_VERSION:
            raise InvalidSchedule(
                f"chaoslight_schedule={version!r} is not a schedule version this chaoslight "
                f"reads (expected {SCHEMA_VERSION})"
            )
        unknown = set(doc) - {"chaoslight_schedule", "faults", "memory_budget", "restarts"}
        if unknown:
            raise InvalidSchedule(f"unknown schedule key {sorted(unknown)[0]!r}")
        raw_faults = doc.get("faults", [])
        if not isinstance(raw_faults, list):
            raise InvalidSchedule(f"faults={short_repr(raw_faults)} must be a list")
        check_fault_count(len(raw_faults))  # before building a million of them
        faults = [indexed(index, fault_from_dict, raw) for index, raw in enumerate(raw_faults)]
        budget = doc.get("memory_budget")
        if budget is not None:
            if not isinstance(budget, dict):
                raise InvalidSchedule(f"memory_budget={budget!r} must be an object")
            budget = wrap(lambda: MemoryBudget(**budget), "memory_budget")
        return cls(faults, memory_budget=budget, restarts=doc.get("restarts", 0))

    @classmethod
    def from_json(cls, text: str) -> Schedule:
        _check_str(text, "JSON")
        try:
            doc = parse_json("schedule JSON", text)
        except InvalidArgument as exc:
            raise InvalidSchedule(str(exc)) from None
        return cls.from_dict(doc)

    # -- text ---------------------------------------------------------------------------
    def to_text(self) -> str:
        return schedule_to_text(self.faults, self.memory_budget, self.restarts)

    @classmethod
    def from_text(cls, text: str) -> Schedule:
        _check_str(text)
        faults, budget, restarts = schedule_from_text(text)
        return cls(faults, memory_budget=budget, restarts=restarts)

    @classmethod
    def parse(cls, text: str) -> Schedule:
        """Read either form: JSON if it starts with ``{``, else the text form."""
        _check_str(text)
        return cls.from_json(text) if text.lstrip().startswith("{") else cls.from_text(text)

    @classmethod
    def load(cls, path: str | Path) -> Schedule:
        try:
            text = read_text_file("schedule file", path)
        except InvalidArgument as exc:
            raise InvalidSchedule(str(exc)) from None
        return cls.parse(text)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n")


def _check_str(text: Any, form: str = "text or JSON") -> None:
    if not isinstance(text, str):
        raise InvalidSchedule(f"text={text!r} must be a str (a schedule's {form} form)")


def _fault_items(faults: Any) -> tuple[Any, ...]:
    """The faults as a tuple; a schedule's text, JSON or dict form is named, not iterated."""
    if isinstance(faults, (str, bytes)):
        raise InvalidSchedule(
            f"faults={short_repr(faults)} is a schedule's text form: use Schedule.parse(...)"
        )
    if isinstance(faults, dict):
        raise InvalidSchedule(
            f"faults={short_repr(faults)} is a schedule's JSON form: use Schedule.from_dict(...)"
        )
    try:
        return tuple(faults)
    except TypeError:
        raise InvalidSchedule(
            f"faults={short_repr(faults)} must be a fault or a list of faults"
        ) from None
