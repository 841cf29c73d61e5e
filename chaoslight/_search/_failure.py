"""A found failure on disk: the schedule plus how to run it again, and an emitted test."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaoslight._schedule._errors import InvalidSchedule
from chaoslight._schedule._model import Schedule

FAILURE_VERSION = 1


@dataclass(frozen=True)
class Failure:
    """Everything ``chaoslight replay`` needs: schedule, target, world size, timeout, checks."""

    schedule: Schedule
    target: str = ""
    world_size: int = 2
    timeout: float = 30.0
    checks: tuple[str, ...] = ()
    mode: str = "survive"
    reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        doc = {
            "chaoslight_failure": FAILURE_VERSION,
            "target": self.target,
            "world_size": self.world_size,
            "timeout": self.timeout,
            "checks": list(self.checks),
            "mode": self.mode,
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
        if '"chaoslight_failure"' not in text:
            return cls(Schedule.parse(text))
        try:
            doc = json.loads(text)
            return cls(
                Schedule.from_dict(doc["schedule"]),
                doc.get("target", ""),
                int(doc.get("world_size", 2)),
                float(doc.get("timeout", 30.0)),
                tuple(doc.get("checks", ())),
                doc.get("mode", "survive"),
                doc.get("reason", ""),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidSchedule(
                f"{str(path)!r} is not a chaoslight failure file: {exc}"
            ) from None


def replay_command(path: str | Path, failure: Failure) -> str:
    return f"chaoslight replay {path}" + (f" {failure.target}" if failure.target else "")


def emit_test(failure: Failure, path: str | Path) -> None:
    """Write a plain pytest test that replays the minimal schedule against the target."""
    name = (
        re.sub(
            r"\W+",
            "_",
            Path(failure.target.split(":")[0]).stem + "_" + failure.target.split(":")[-1],
        )
        .strip("_")
        .lower()
        or "target"
    )
    checks = ", ".join(f"check_by_name({c!r})" for c in failure.checks)
    schedule_text = failure.schedule.to_text().replace('"""', '\\"\\"\\"')
    expect = (
        "assert outcome.passed, outcome.report()"
        if failure.mode == "survive"
        else "assert not outcome.violations, outcome.report()\n"
        "    # the injected error must end the run, promptly and visibly\n"
        '    assert outcome.status in ("failed", "crashed"), outcome.report()'
    )
    verb = "survive" if failure.mode == "survive" else "fail cleanly under"
    source = f'''"""Regression test from `chaoslight fuzz`: replays a minimal failing schedule.

Found failure: {failure.reason[:300]}
"""

import chaoslight
from chaoslight.checks import check_by_name

SCHEDULE = chaoslight.Schedule.parse(
    """
{schedule_text}
"""
)


def test_{name}_under_minimal_schedule():
    """{failure.target} must {verb} this schedule."""
    with chaoslight.World(size={failure.world_size}) as world:
        outcome = world.run(
            {failure.target!r}, SCHEDULE, timeout={failure.timeout!r}, checks=[{checks}]
        )
    {expect}
'''
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(source)
