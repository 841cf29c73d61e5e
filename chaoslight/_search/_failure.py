"""A found failure on disk: the schedule plus how to run it again, and an emitted test."""

from __future__ import annotations

import importlib
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaoslight._runtime import CHECK_FACTORIES, check_from_name
from chaoslight._schedule._errors import InvalidSchedule
from chaoslight._schedule._model import Schedule

# The cheap checks every default search runs: each holds for every correct program under
# the oracle's rules (docs/explanation/oracle.md). A bare schedule file replays with them.
DEFAULT_CHECKS = ("replicas-in-sync", "disjoint-shards", "finite-loss", "errors-surface", "no-hang")
FAILURE_VERSION = 2  # 2: checks as specs (name, parameters, import path); a status


@dataclass(frozen=True)
class Failure:
    """Everything ``chaoslight replay`` needs: schedule, target, world size, timeout, and
    each check's full spec (name and parameters, or a user check's import path), so a
    replay judges exactly as the search did."""

    schedule: Schedule
    target: str = ""
    world_size: int = 2
    timeout: float = 30.0
    checks: tuple[dict[str, Any], ...] = ()
    reason: str = ""
    status: str = "failed"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def check_names(self) -> tuple[str, ...]:
        return tuple(str(spec.get("name", "?")) for spec in self.checks)

    def build_checks(self) -> list[Any]:
        """The checks, rebuilt from their specs."""
        return [check_from_spec(spec) for spec in self.checks]

    def to_json(self) -> str:
        doc = {
            "chaoslight_failure": FAILURE_VERSION,
            "target": self.target,
            "world_size": self.world_size,
            "timeout": self.timeout,
            "checks": list(self.checks),
            "status": self.status,
            "reason": self.reason,
            "schedule": self.schedule.to_dict(),
        }
        return json.dumps(doc, indent=2)

    def save(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(self.to_json() + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Failure:
        """Read a failure file, or a plain schedule file (JSON or text) as a bare failure."""
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise InvalidSchedule(f"cannot read {str(path)!r}: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise InvalidSchedule(
                f"cannot read {str(path)!r}: not UTF-8 text (byte {exc.start})"
            ) from None
        if '"chaoslight_failure"' not in text:
            return cls(Schedule.parse(text), checks=default_specs())
        try:
            return cls.from_dict(json.loads(text))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InvalidSchedule(
                f"{str(path)!r} is not a chaoslight failure file: {exc}"
            ) from None

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Failure:
        # Version 1 stored check names only: read them as specs with no parameters.
        specs = tuple(
            spec if isinstance(spec, dict) else {"name": spec, "params": {}}
            for spec in doc.get("checks", ())
        )
        return cls(
            Schedule.from_dict(doc["schedule"]),
            doc.get("target", ""),
            int(doc.get("world_size", 2)),
            float(doc.get("timeout", 30.0)),
            specs,
            doc.get("reason", ""),
            doc.get("status", "failed"),
        )


def check_specs(checks: Iterable[Any]) -> tuple[dict[str, Any], ...]:
    """Each check's spec: its registered name and parameters, or its import path."""
    specs = []
    for check in checks:
        spec = dict(check.spec()) if hasattr(check, "spec") else {"name": check.name}
        spec.setdefault("params", {})
        if spec.get("name") not in CHECK_FACTORIES:
            spec["import"] = f"{type(check).__module__}:{type(check).__qualname__}"
        specs.append(spec)
    return tuple(specs)


def default_specs() -> tuple[dict[str, Any], ...]:
    """The default checks' specs (a bare schedule file replays with these)."""
    from_names = [check_from_name(name) for name in DEFAULT_CHECKS]
    return check_specs(from_names)


def check_from_spec(spec: dict[str, Any]) -> Any:
    """A check rebuilt from a failure file: by registered name, or by import path."""
    params = dict(spec.get("params") or {})
    if "import" in spec:
        module_name, _, qualname = str(spec["import"]).partition(":")
        try:
            obj: Any = importlib.import_module(module_name)
            for part in qualname.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            raise InvalidSchedule(f"check {spec['import']!r} cannot be imported: {exc}") from None
        return obj(**params)
    return check_from_name(str(spec.get("name")), **params)


def replay_command(path: str | Path, failure: Failure) -> str:
    return f"chaoslight replay {path}" + (f" {failure.target}" if failure.target else "")


def emit_test(failure: Failure, path: str | Path) -> None:
    """Write a plain pytest test that replays the minimal schedule against the target.

    Every text from the failure (target, reason, schedule, check parameters) goes in as a
    ``repr()`` literal or an escaped comment, so the file is valid Python whatever it holds.
    """
    source = f'''"""Regression test from `chaoslight fuzz`: replays a minimal failing schedule."""

# Found failure:
{_comment(failure.reason[:MAX_REASON], indent="#   ")}

import chaoslight

TARGET = {_literal(failure.target)}
SCHEDULE = {_schedule_source(failure.schedule)}
# Each check as the search ran it: its name and parameters, or its import path.
CHECKS = {_literal(list(failure.checks))}


def test_{_test_name(failure.target)}_under_minimal_schedule():
    {_docstring(f"{failure.target} must pass under this schedule, judged as the search judged.")}
    failure = chaoslight.Failure(
        SCHEDULE,
        TARGET,
        world_size={_literal(failure.world_size)},
        timeout={_literal(failure.timeout)},
        checks=tuple(CHECKS),
    )
    verdict, outcome = chaoslight.replay(failure)
    assert not verdict.failed, verdict.reason + "\\n" + outcome.report()
'''
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(source, encoding="utf-8")


MAX_REASON = 2000


def _test_name(target: str) -> str:
    """An identifier from the target's file stem and function (ASCII: not every \\w is one)."""
    module, _, function = target.rpartition(":")
    text = Path(module).stem + "_" + function if module else function
    return re.sub(r"\W+", "_", text, flags=re.ASCII).strip("_").lower() or "target"


def _comment(text: str, indent: str) -> str:
    """``text`` as comment lines: every line break starts a new comment, and characters a
    source line cannot hold (NUL, lone surrogates, other controls) are written escaped."""
    lines = text.splitlines() or [""]
    return "\n".join((indent + _printable(line)).rstrip() for line in lines)


def _printable(line: str) -> str:
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)


def _docstring(text: str) -> str:
    """A triple-quoted docstring where the text allows one, else its ``repr()``."""
    if text.isprintable() and '"' not in text and "\\" not in text:
        return f'"""{text}"""'
    return repr(text)


def _literal(value: Any) -> str:
    """Python source that evaluates to ``value`` (JSON-like data: str, numbers, lists, dicts)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_literal(item) for item in value) + "]"
    if isinstance(value, dict):
        items = (f"{_literal(key)}: {_literal(item)}" for key, item in value.items())
        return "{" + ", ".join(items) + "}"
    return repr(value)


def _schedule_source(schedule: Schedule) -> str:
    """The schedule in its text form, one literal per line; its JSON form if the text form
    would not read back equal."""
    text = schedule.to_text()
    if Schedule.parse(text) != schedule:
        return f"chaoslight.Schedule.from_dict({_literal(schedule.to_dict())})"
    lines = "".join(f"            {line!r},\n" for line in text.splitlines())
    return f'chaoslight.Schedule.parse(\n    "\\n".join(\n        [\n{lines}        ]\n    )\n)'
