"""The one-line text form of a fault, as reports print it and users write it back.

    oom@lightning.training_step rank=1 step=3
    delay@dist.all_reduce rank=0 nth=2 seconds=0.5
    raise@torch.save exception=OSError args=[28,"No space left on device"]
    raise@lightning.load_checkpoint rank=1 run=2
    budget limit_bytes=2GiB

``KIND@SITE`` then ``key=value`` pairs; values are JSON, or bare words. Fields at
their defaults are left out; ``rank=*`` means every rank, ``times=*`` every call,
``run=2`` only the second run of a schedule with restarts, ``run=every`` each run.
Sizes accept KiB/MiB/GiB suffixes. Blank lines and ``#`` comments are skipped.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from chaoslight._schedule._budget import MemoryBudget
from chaoslight._schedule._encode import BARE, fault_to_text
from chaoslight._schedule._errors import InvalidArgument, InvalidSchedule, short_repr, suggest
from chaoslight._schedule._faults import FAULT_KINDS, Fault
from chaoslight._schedule._validate import MAX_SCHEDULE_FAULTS, SCHEDULE_FAULTS_WHY, parse_json

# A number followed by letters: a size, whose unit is then looked up in _UNITS.
_SIZE = re.compile(r"^([-+]?\d+(?:\.\d+)?)\s*([A-Za-z]+)$")
_UNITS = {
    "B": 1,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
}
_SIZE_FIELDS = {"nbytes", "limit_bytes", "min_tracked_bytes"}


def schedule_to_text(
    faults: Sequence[Fault], budget: MemoryBudget | None, restarts: int = 0
) -> str:
    lines = [fault_to_text(f) for f in faults]
    if restarts:
        lines.insert(0, f"restarts {restarts}")
    if budget is not None:
        line = f"budget limit_bytes={budget.limit_bytes}"
        if (
            budget.min_tracked_bytes
            != MemoryBudget.__dataclass_fields__["min_tracked_bytes"].default
        ):
            line += f" min_tracked_bytes={budget.min_tracked_bytes}"
        lines.insert(0, line)
    return "\n".join(lines)


def _tokens(line: str) -> list[str]:
    """Split on spaces that are outside double quotes and brackets."""
    tokens, current, depth, quoted, escaped = [], "", 0, False, False
    for char in line:
        if quoted:
            current += char
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                quoted = False
            continue
        if char.isspace() and depth == 0:
            if current:
                tokens.append(current)
            current = ""
            continue
        current += char
        if char == '"':
            quoted = True
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
    if quoted or depth:
        raise InvalidSchedule("unbalanced quote or bracket")
    if current:
        tokens.append(current)
    return tokens


def decode_value(name: str, text: str) -> Any:
    if text == "*":
        return None
    if name in _SIZE_FIELDS and (match := _SIZE.match(text)):
        return _size(name, text, match.group(1), match.group(2))
    try:
        value = parse_json(name, text)
    except InvalidArgument as exc:
        if BARE.match(text):
            return text  # a bare word such as OSError or 2,0,1
        raise InvalidSchedule(
            f"{name}={short_repr(text)} is neither JSON nor a bare word ({exc})"
        ) from None
    return tuple(value) if isinstance(value, list) else value


def _size(name: str, text: str, number: str, unit: str) -> int:
    """``512MiB`` as bytes; a negative size, a fraction of a byte or an unknown unit is named."""
    if unit not in _UNITS:
        raise InvalidSchedule(
            f"{name}={text!r} has an unknown unit {unit!r}; known units: {', '.join(_UNITS)}"
        )
    if number.startswith("-"):
        raise InvalidSchedule(f"{name}={text} must not be negative")
    nbytes = float(number) * _UNITS[unit]
    if not math.isfinite(nbytes):  # 400 digits of TiB: a float overflows to inf
        raise InvalidSchedule(f"{name}={text} is too large to be a size in bytes")
    if nbytes != int(nbytes):
        raise InvalidSchedule(f"{name}={text} is {nbytes:g} bytes: give a whole number of bytes")
    return int(nbytes)


def _pairs(tokens: list[str]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for token in tokens:
        name, sep, raw = token.partition("=")
        if not sep or not name:
            raise InvalidSchedule(f"{token!r} is not key=value")
        if name in result:
            raise InvalidSchedule(f"{name} is given twice")
        result[name] = decode_value(name, raw)
    return result


def fault_from_text(line: str) -> Fault:
    head, *rest = _tokens(line)
    kind, sep, site = head.partition("@")
    if not sep or not site:
        raise InvalidSchedule(f"{head!r} must be KIND@SITE, e.g. oom@lightning.training_step")
    return make_fault(kind, {"site": site, **_pairs(rest)})


def schedule_from_text(text: str) -> tuple[list[Fault], MemoryBudget | None, int]:
    """The faults, the budget and the restarts of a schedule's text form."""
    faults: list[Fault] = []
    budget: MemoryBudget | None = None
    restarts = 0
    for number, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            if line.split()[0] == "budget":
                budget = _budget(line)
            elif line.split()[0] == "restarts":
                restarts = _restarts(line)
            else:
                faults.append(fault_from_text(line))
                check_fault_count(len(faults))  # before parsing a million of them
        except InvalidSchedule as exc:
            raise InvalidSchedule(f"line {number}: {exc}") from None
    return faults, budget, restarts


def check_fault_count(count: int) -> None:
    """A schedule holds at most ``MAX_SCHEDULE_FAULTS`` faults."""
    if count > MAX_SCHEDULE_FAULTS:
        raise InvalidSchedule(
            f"a schedule of {count} faults is more than {MAX_SCHEDULE_FAULTS} "
            f"({SCHEDULE_FAULTS_WHY}); split it"
        )


def _restarts(line: str) -> int:
    words = line.split()
    if len(words) != 2 or not (words[1].isascii() and words[1].isdigit()):
        raise InvalidSchedule(f"{line!r} must be 'restarts N', N a whole number of runs")
    return int(words[1])


def _budget(line: str) -> MemoryBudget:
    pairs = _pairs(_tokens(line)[1:])
    try:
        return MemoryBudget(**pairs)
    except (TypeError, ValueError) as exc:
        raise InvalidSchedule(f"budget: {exc}") from None


def fault_to_dict(fault: Fault) -> dict[str, Any]:
    doc: dict[str, Any] = {"kind": fault.kind}
    doc.update(fault.trigger())
    if doc["run"] is None:
        del doc["run"]  # unbound: a schedule without restarts reads as it always did
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
    allowed = {"site", "rank", "step", "nth", "times", "run", *cls.__dataclass_fields__}
    for name in fields_:
        if name not in allowed:
            raise InvalidSchedule(f"{kind} has no field {name!r}{suggest(name, allowed)}")
    if "site" not in fields_:
        raise InvalidSchedule(f"{kind} needs a site, e.g. {kind}@lightning.training_step")
    return wrap(lambda: cls(**fields_), kind)


def wrap(build: Any, where: str) -> Any:
    try:
        return build()
    except InvalidSchedule:
        raise
    except InvalidArgument as exc:
        raise InvalidSchedule(f"{where}: {exc}") from None
    except TypeError as exc:
        raise InvalidSchedule(f"{where}: {exc}") from None


def indexed(index: int, build: Any, raw: Any) -> Any:
    try:
        return build(raw)
    except InvalidSchedule as exc:
        raise InvalidSchedule(f"faults[{index}]: {exc}") from None
