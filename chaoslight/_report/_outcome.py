"""What one example run in a World did: its status, per-rank results, merged events.

``Outcome`` is data; how it reads (the summary, the report, the timeline) is
``_report/_text.py`` and ``_report/_timeline*.py``, which its methods call.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from chaoslight._report._culprit import Culprit, find_culprit
from chaoslight._report._records import RankResult
from chaoslight._report._status import CRASHED, FAILED, HUNG, PASSED, RELEASED, Status
from chaoslight._report._text import cause_first, describe, rank_end, report, summary
from chaoslight._report._timeline import Header, Timeline, build, render_text
from chaoslight._report._timeline_html import render_html
from chaoslight._runtime._events import Event
from chaoslight._schedule._model import Schedule


@dataclass(frozen=True)
class Outcome:
    """The result of ``World.run``: status, per-rank results, all ranks' events by time."""

    status: Status
    ranks: tuple[RankResult, ...]
    events: list[Event] = field(default_factory=list)
    wall_s: float = 0.0
    schedule: Schedule = field(default_factory=Schedule)
    target: str = ""
    timeout: float = 0.0
    violations: tuple[Any, ...] = ()  # what the checks found; any makes a pass "failed"
    attempts: tuple[Outcome, ...] = ()  # earlier runs of a schedule with restarts, in order

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    @property
    def culprit(self) -> Culprit | None:
        """What the report names first, as data (``_report/_culprit.py``): the rank, the
        site and step of the injected fault it names, and the kind of cause. None when
        every rank passed."""
        return find_culprit(self.ranks, self.events, self.schedule)

    @property
    def evidence(self) -> dict[int, str]:
        """Per rank, one line: where it waited (hung), how it died, what it raised."""
        return {r.rank: r.evidence for r in self.ranks if r.evidence}

    def summary(self) -> str:
        """Status and time, then the root cause first and its consequences after."""
        return summary(self)

    def report(self) -> str:
        """The summary, each rank's exception or stack, and the event log."""
        return report(self)

    def timeline(self, verdict_text: str | None = None, replay_command: str = "") -> Timeline:
        """The per-rank timeline of this example (``_report/_timeline.py``)."""
        failing = any(r.status != PASSED for r in self.ranks)
        header = Header(
            self.target,
            self.status,
            verdict_text or self.summary(),
            cause_first(self) if failing else "",
            self.schedule.to_text(),
            replay_command,
            self.wall_s,
        )
        return build(header, self.events, [rank_end(r) for r in self.ranks])

    def timeline_text(self) -> str:
        """The timeline as a compact table, one column per rank (terminals, CI logs)."""
        return render_text(self.timeline())

    def to_html(
        self,
        path: str | os.PathLike[str],
        verdict_text: str | None = None,
        replay_command: str | None = None,
    ) -> Path:
        """Write the timeline as one self-contained HTML page (inline SVG and CSS, nothing
        fetched); returns its path. Spans show when the run was traced
        (``World.run(..., trace=True)``); otherwise faults and each rank's end."""
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        page = render_html(self.timeline(verdict_text, replay_command or ""))
        out.write_text(page, encoding="utf-8")
        return out

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        # Short: pytest prints the repr of an outcome in a failed assert, and the ranks'
        # tracebacks, stacks and output would fill the screen.
        return f"<Outcome {self.summary()[:300]}>"


def settle(results: list[RankResult]) -> tuple[RankResult, ...]:
    """Mark consequential distributed errors ``released``; fill in missing evidence."""
    causes = [
        r
        for r in results
        if r.status in (HUNG, CRASHED)
        or (r.status == FAILED and r.exception is not None and not r.exception.distributed)
    ]
    settled = []
    for result in results:
        if (
            result.status == FAILED
            and result.exception is not None
            and result.exception.distributed
            and any(c.rank != result.rank for c in causes)
        ):
            result = replace(result, status=RELEASED)
        if not result.evidence:
            result = replace(result, evidence=describe(result))
        settled.append(result)
    return tuple(sorted(settled, key=lambda r: r.rank))


def overall(ranks: tuple[RankResult, ...]) -> Status:
    """The example's status: the most severe of its ranks'."""
    statuses = {r.status for r in ranks}
    for status in (CRASHED, HUNG):
        if status in statuses:
            return status
    return FAILED if statuses & {FAILED, RELEASED} else PASSED
