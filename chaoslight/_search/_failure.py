"""A found failure on disk: the schedule plus how to run it again, and an emitted test."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaoslight._runtime import CHECK_FACTORIES, check_from_name
from chaoslight._schedule._errors import InvalidArgument, InvalidSchedule, short_repr
from chaoslight._schedule._model import Schedule
from chaoslight._schedule._validate import (
    check_import_path,
    check_timeout,
    check_world_size,
    parse_json,
    read_text_file,
)
from chaoslight._search._specs import read_spec, resolve_specs, skip_line
from chaoslight._search._statuses import FOUND
from chaoslight._world import WORLD_TIMEOUT_S

# The cheap checks every default search runs: each holds for every correct program under
# the oracle's rules (docs/explanation/oracle.md). A bare schedule file replays with them.
# What a search judges every run by when given no checks: the loud failures, then the
# silent damage (a restart that resumes wrong, a job that reports success having
# stopped early, buffers apart, data repeated) and the facts the known issues read.
DEFAULT_CHECKS = (
    "replicas-in-sync",
    "disjoint-shards",
    "finite-loss",
    "errors-surface",
    "no-hang",
    "restart-equivalence",
    "exit-status",
    "buffers-in-sync",
    "data-order",
    "learned-invariants",
    "framework-facts",
)
FAILURE_VERSION = 2  # 2: checks as specs (name, parameters, import path); a status


@dataclass(frozen=True)
class Failure:
    """Everything ``chaoslight replay`` needs: schedule, target, world size, timeout, and
    each check's full spec (name and parameters, or a user check's import path), so a
    replay judges exactly as the search did."""

    schedule: Schedule
    target: str = ""
    world_size: int = 2
    timeout: float = WORLD_TIMEOUT_S  # a file without one: the World's own default
    checks: tuple[dict[str, Any], ...] = ()
    reason: str = ""
    status: str = FOUND  # the campaign's (``CampaignStatus``); a file's, as text
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def check_names(self) -> tuple[str, ...]:
        return tuple(str(spec.get("name", "?")) for spec in self.checks)

    def build_checks(self, user_checks: Iterable[Any] = ()) -> list[Any]:
        """The checks, rebuilt from their specs (see ``resolve_checks``; skipped ones left out)."""
        return self.resolve_checks(user_checks)[0]

    def resolve_checks(self, user_checks: Iterable[Any] = ()) -> tuple[list[Any], list[str]]:
        """The checks to judge with, and one line for each check left out: see
        ``_specs.resolve_specs`` (a user check's import path is never imported)."""
        return resolve_specs(self.checks, user_checks)

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
            text = read_text_file("failure or schedule file", path)
        except InvalidArgument as exc:
            raise InvalidSchedule(str(exc)) from None
        if '"chaoslight_failure"' not in text:
            return cls(Schedule.parse(text), checks=default_specs())
        try:
            return cls.from_dict(parse_json(repr(str(path)), text))
        except InvalidArgument as exc:
            raise InvalidSchedule(
                f"{str(path)!r} is not a chaoslight failure file: {exc}"
            ) from None

    @classmethod
    def from_dict(cls, doc: Any) -> Failure:
        """A failure from its JSON form, every field checked: a file is data, and a
        colleague's file may be anything (docs/explanation/trust.md)."""
        if not isinstance(doc, dict):
            raise InvalidSchedule(f"a failure file holds a JSON object, not {type(doc).__name__}")
        if "schedule" not in doc:
            raise InvalidSchedule("a failure file needs a 'schedule'")
        raw_checks = doc.get("checks", [])
        if not isinstance(raw_checks, list):
            raise InvalidSchedule(f"checks={short_repr(raw_checks)} must be a list of check specs")
        return cls(
            Schedule.from_dict(doc["schedule"]),
            _text(doc, "target", ""),
            check_world_size("world_size", doc.get("world_size", 2)),
            check_timeout("timeout", doc.get("timeout", WORLD_TIMEOUT_S)),
            tuple(read_spec(index, raw) for index, raw in enumerate(raw_checks)),
            _text(doc, "reason", ""),
            _text(doc, "status", FOUND),
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


def _text(doc: dict[str, Any], key: str, default: str) -> str:
    value = doc.get(key, default)
    if not isinstance(value, str):
        raise InvalidSchedule(f"{key}={short_repr(value)} must be a string")
    return value


def replay_command(path: str | Path, failure: Failure) -> str:
    return f"chaoslight replay {path}" + (f" {failure.target}" if failure.target else "")


# The first line of every emitted test: how ``--emit-test`` knows a file as its own.
EMITTED_TEST_HEADER = (
    '"""Regression test from `chaoslight fuzz`: replays a minimal failing schedule."""'
)


def emit_test(failure: Failure, path: str | Path) -> None:
    """Write a plain pytest test that replays the minimal schedule against the target.

    Every text from the failure (target, reason, schedule, check parameters) goes in as a
    ``repr()`` literal or an escaped comment, so the file is valid Python whatever it holds.
    """
    source = f"""{EMITTED_TEST_HEADER}

# Found failure:
{_comment(failure.reason[:MAX_REASON], indent="#   ")}

import chaoslight
{_user_check_source(failure.checks)}
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
    verdict, outcome = {_replay_call(failure.checks)}
    assert not verdict.failed, verdict.reason + "\\n" + outcome.report()
"""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(source, encoding="utf-8")


MAX_REASON = 2000


def _user_check_source(specs: Iterable[dict[str, Any]]) -> str:
    """The user checks' classes, imported by name in the emitted source (their import path is
    code the test's reader sees, never a string the test imports), then ``USER_CHECKS``."""
    lines, names = [], []
    for spec in specs:
        if "import" not in spec:
            continue
        try:
            module, qualname = check_import_path("check", spec["import"])
        except InvalidArgument:
            lines.append(_comment(skip_line(spec), indent="# "))
            continue
        lines.append(f"from {module} import {qualname.partition('.')[0]}")
        names.append(qualname)
    if not lines:
        return ""
    return "\n".join(lines) + f"\n\nUSER_CHECKS = [{', '.join(names)}]\n"


def _replay_call(specs: Iterable[dict[str, Any]]) -> str:
    specs = list(specs)
    if any("import" in spec for spec in specs):
        return "chaoslight.replay(failure, user_checks=USER_CHECKS)"
    return "chaoslight.replay(failure)"


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
