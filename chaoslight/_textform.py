"""The one-line text form of a fault, as reports print it and users write it back.

    oom@lightning.training_step rank=1 step=3
    delay@dist.all_reduce rank=0 nth=2 seconds=0.5
    raise@torch.save exception=OSError args=[28,"No space left on device"]
    budget limit_bytes=2GiB

``KIND@SITE`` then ``key=value`` pairs; values are JSON, or bare words. Fields at
their defaults are left out; ``rank=*`` means every rank, ``times=*`` every call.
Sizes accept KiB/MiB/GiB suffixes. Blank lines and ``#`` comments are skipped.
"""

from __future__ import annotations

import json
import re
from dataclasses import MISSING, fields
from typing import Any

from chaoslight._errors import InvalidSchedule
from chaoslight._faults import Fault
from chaoslight._schedule import MemoryBudget, Schedule, make_fault

_BARE = re.compile(r"^[A-Za-z0-9_.:,\-]+$")
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)$")
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
_TRIGGER_DEFAULTS: dict[str, Any] = {"rank": None, "step": None, "nth": None, "times": 1}
_SIZE_FIELDS = {"nbytes", "limit_bytes", "min_tracked_bytes"}


def encode_value(value: Any) -> str:
    if value is None:
        return "*"
    if isinstance(value, str) and _BARE.match(value) and not _is_json(value):
        return value
    if isinstance(value, tuple):
        value = list(value)
    return json.dumps(value, separators=(",", ":"))


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def fault_to_text(fault: Fault) -> str:
    parts = [f"{fault.kind}@{fault.site}"]
    for name, default in _TRIGGER_DEFAULTS.items():
        value = getattr(fault, name)
        if value != default:
            parts.append(f"{name}={encode_value(value)}")
    defaults = {f.name: f.default for f in fields(fault) if f.default is not MISSING}
    for name, value in fault.params().items():
        if name not in defaults or defaults[name] != value:
            parts.append(f"{name}={encode_value(value)}")
    return " ".join(parts)


def schedule_to_text(schedule: Schedule) -> str:
    lines = [fault_to_text(f) for f in schedule.faults]
    budget = schedule.memory_budget
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
        return int(float(match.group(1)) * _UNITS[match.group(2)])
    try:
        value = json.loads(text)
    except ValueError:
        if _BARE.match(text):
            return text
        raise InvalidSchedule(f"{name}={text} is neither JSON nor a bare word") from None
    return tuple(value) if isinstance(value, list) else value


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


def schedule_from_text(text: str) -> Schedule:
    faults: list[Fault] = []
    budget: MemoryBudget | None = None
    for number, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            if line.split()[0] == "budget":
                budget = _budget(line)
            else:
                faults.append(fault_from_text(line))
        except InvalidSchedule as exc:
            raise InvalidSchedule(f"line {number}: {exc}") from None
    return Schedule(faults, memory_budget=budget)


def _budget(line: str) -> MemoryBudget:
    pairs = _pairs(_tokens(line)[1:])
    try:
        return MemoryBudget(**pairs)
    except (TypeError, ValueError) as exc:
        raise InvalidSchedule(f"budget: {exc}") from None
