"""Schedules: an ordered, immutable collection of faults, with JSON and text forms."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaoslight._errors import InvalidArgument, InvalidSchedule, suggest
from chaoslight._faults import FAULT_KINDS, Fault, check_int

SCHEMA_VERSION = 1
DEFAULT_MIN_TRACKED_BYTES = 2**20


@dataclass(frozen=True)
class MemoryBudget:
    """A per-rank device-memory limit, so an allocation can run out on a CPU machine.

    Every rank gets ``limit_bytes``. Live ``Allocate`` holds count against it, and so do
    tensors of at least ``min_tracked_bytes`` made by torch's factory functions
    (``empty``, ``zeros``, ``ones``, ``rand``, ``randn``, ``full`` and their ``_like``
    forms) while they live. Going over raises the simulated CUDA OOM on that rank.
    """

    limit_bytes: int
    min_tracked_bytes: int = DEFAULT_MIN_TRACKED_BYTES

    def __post_init__(self) -> None:
        check_int("limit_bytes", self.limit_bytes, 1)
        check_int("min_tracked_bytes", self.min_tracked_bytes, 1)


@dataclass(frozen=True)
class Schedule:
    """An ordered, immutable collection of faults: exactly what fires where and when.

    ``Schedule()`` is valid and injects nothing. ``str(schedule)`` is the text form,
    one fault per line, that reports print and ``Schedule.parse`` reads back.
    """

    faults: tuple[Fault, ...] = ()
    memory_budget: MemoryBudget | None = None

    def __init__(
        self, faults: Iterable[Fault] = (), memory_budget: MemoryBudget | None = None
    ) -> None:
        if isinstance(faults, Fault):
            faults = (faults,)
        items = tuple(faults)
        for index, fault in enumerate(items):
            if not isinstance(fault, Fault):
                raise InvalidSchedule(
                    f"faults[{index}]={fault!r} is not a fault; use chaoslight.Delay, OOM, ..."
                )
        if memory_budget is not None and not isinstance(memory_budget, MemoryBudget):
            raise InvalidSchedule(f"memory_budget={memory_budget!r} must be a MemoryBudget")
        object.__setattr__(self, "faults", items)
        object.__setattr__(self, "memory_budget", memory_budget)

    def __iter__(self) -> Iterator[Fault]:
        return iter(self.faults)

    def __len__(self) -> int:
        return len(self.faults)

    def __bool__(self) -> bool:
        return bool(self.faults) or self.memory_budget is not None

    def __str__(self) -> str:
        return self.to_text()

    @property
    def sites(self) -> frozenset[str]:
        return frozenset(fault.site for fault in self.faults)

    # -- JSON ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "chaoslight_schedule": SCHEMA_VERSION,
            "faults": [fault_to_dict(f) for f in self.faults],
        }
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
        unknown = set(doc) - {"chaoslight_schedule", "faults", "memory_budget"}
        if unknown:
            raise InvalidSchedule(f"unknown schedule key {sorted(unknown)[0]!r}")
        raw_faults = doc.get("faults", [])
        if not isinstance(raw_faults, list):
            raise InvalidSchedule(f"faults={raw_faults!r} must be a list")
        faults = [_indexed(index, fault_from_dict, raw) for index, raw in enumerate(raw_faults)]
        budget = doc.get("memory_budget")
        if budget is not None:
            if not isinstance(budget, dict):
                raise InvalidSchedule(f"memory_budget={budget!r} must be an object")
            budget = _wrap(lambda: MemoryBudget(**budget), "memory_budget")
        return cls(faults, memory_budget=budget)

    @classmethod
    def from_json(cls, text: str) -> Schedule:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidSchedule(
                f"schedule JSON is malformed at line {exc.lineno}, column {exc.colno}: {exc.msg}"
            ) from None
        return cls.from_dict(doc)

    # -- text ---------------------------------------------------------------------------
    def to_text(self) -> str:
        from chaoslight._textform import schedule_to_text

        return schedule_to_text(self)

    @classmethod
    def from_text(cls, text: str) -> Schedule:
        from chaoslight._textform import schedule_from_text

        _check_str(text)
        return schedule_from_text(text)

    @classmethod
    def parse(cls, text: str) -> Schedule:
        """Read either form: JSON if it starts with ``{``, else the text form."""
        _check_str(text)
        return cls.from_json(text) if text.lstrip().startswith("{") else cls.from_text(text)

    @classmethod
    def load(cls, path: str | Path) -> Schedule:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise InvalidSchedule(
                f"cannot read schedule file {str(path)!r}: {exc.strerror}"
            ) from None
        except UnicodeDecodeError as exc:
            raise InvalidSchedule(
                f"cannot read schedule file {str(path)!r}: not UTF-8 text (byte {exc.start})"
            ) from None
        return cls.parse(text)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n")


def _check_str(text: Any) -> None:
    if not isinstance(text, str):
        raise InvalidSchedule(f"text={text!r} must be a str (a schedule's text or JSON form)")


def fault_to_dict(fault: Fault) -> dict[str, Any]:
    doc: dict[str, Any] = {"kind": fault.kind}
    doc.update(fault.trigger())
    for name, value in fault.params().items():
        doc[name] = list(value) if isinstance(value, tuple) else value
    return doc


def fault_from_dict(raw: Any) -> Fault:
    if not isinstance(raw, dict):
        raise InvalidSchedule(f"a fault must be an object, not {type(raw).__name__}")
    fields_ = dict(raw)
    kind = fields_.pop("kind", None)
    return make_fault(kind, fields_)


def make_fault(kind: Any, fields_: dict[str, Any]) -> Fault:
    """Build a fault of kind name ``kind`` from keyword fields, with one-line errors."""
    cls = FAULT_KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise InvalidSchedule(
            f"kind={kind!r} is not a fault kind{suggest(str(kind), FAULT_KINDS)}; "
            f"known: {', '.join(FAULT_KINDS)}"
        )
    allowed = {"site", "rank", "step", "nth", "times", *cls.__dataclass_fields__}
    for name in fields_:
        if name not in allowed:
            raise InvalidSchedule(f"{kind} has no field {name!r}{suggest(name, allowed)}")
    if "site" not in fields_:
        raise InvalidSchedule(f"{kind} needs a site, e.g. {kind}@lightning.training_step")
    return _wrap(lambda: cls(**fields_), kind)


def _wrap(build: Any, where: str) -> Any:
    try:
        return build()
    except InvalidSchedule:
        raise
    except InvalidArgument as exc:
        raise InvalidSchedule(f"{where}: {exc}") from None
    except TypeError as exc:
        raise InvalidSchedule(f"{where}: {exc}") from None


def _indexed(index: int, build: Any, raw: Any) -> Any:
    try:
        return build(raw)
    except InvalidSchedule as exc:
        raise InvalidSchedule(f"faults[{index}]: {exc}") from None
