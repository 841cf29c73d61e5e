"""Real outcomes kept as JSON (``tests/outcomes/``), for the oracle's tests to judge again
without a World: what each rank ended with, the event log, the violations, the earlier
runs of a restarted job. ``python tests/outcome_records.py TARGET SCHEDULE NAME`` records
one (2 ranks, the default checks)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from chaoslight import Event, Outcome, Schedule
from chaoslight._report._records import ExceptionInfo, RankResult
from chaoslight._runtime._evidence import OBSERVATION
from chaoslight.checks import Violation

FOLDER = Path(__file__).resolve().parent / "outcomes"
# What the oracle reads of the checks' observations (the ranks' facts, where replicas were
# first compared); the rest only fed the checks, whose violations are kept.
KEPT_OBSERVATIONS = ("framework-facts", "replicas-in-sync")


def dump(outcome: Outcome) -> dict[str, Any]:
    ranks = []
    for result in outcome.ranks:
        doc = {f.name: getattr(result, f.name) for f in fields(result) if f.name != "value"}
        doc["exception"] = result.exception.to_dict() if result.exception else None
        doc["status"] = str(result.status)
        ranks.append(doc)
    return {
        "status": str(outcome.status),
        "ranks": ranks,
        "events": [
            e.to_dict()
            for e in outcome.events
            if e.kind != OBSERVATION or e.site in KEPT_OBSERVATIONS
        ],
        "wall_s": outcome.wall_s,
        "schedule": outcome.schedule.to_text(),
        "target": outcome.target,
        "timeout": outcome.timeout,
        "violations": [asdict(v) for v in outcome.violations],
        "attempts": [dump(run) for run in outcome.attempts],
    }


def load(doc: dict[str, Any]) -> Outcome:
    ranks = []
    for item in doc["ranks"]:
        item = dict(item)
        exc = item.pop("exception")
        ranks.append(RankResult(exception=ExceptionInfo.from_dict(exc) if exc else None, **item))
    return Outcome(
        doc["status"],  # type: ignore[arg-type]
        tuple(ranks),
        [Event.from_dict(e) for e in doc["events"]],
        doc["wall_s"],
        Schedule.parse(doc["schedule"]),
        doc["target"],
        doc["timeout"],
        tuple(Violation(**v) for v in doc["violations"]),
        tuple(load(run) for run in doc["attempts"]),
    )


def recorded() -> dict[str, Outcome]:
    """Every recorded outcome, by file name."""
    return {path.stem: load(json.loads(path.read_text())) for path in sorted(FOLDER.glob("*.json"))}


def main() -> None:
    from chaoslight import World
    from chaoslight._search import DEFAULT_CHECKS

    target, text, name = sys.argv[1:4]
    with World(size=2) as world:
        outcome = world.run(
            target, Schedule.parse(text.replace(" + ", "\n")), checks=list(DEFAULT_CHECKS)
        )
    FOLDER.mkdir(exist_ok=True)
    (FOLDER / f"{name}.json").write_text(json.dumps(dump(outcome), separators=(",", ":")) + "\n")
    print(name, outcome.summary()[:200])


if __name__ == "__main__":
    main()
