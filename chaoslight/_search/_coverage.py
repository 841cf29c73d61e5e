"""What a campaign explored: reached points, the points it put faults on, kinds tried, so
a clean result says how much of the fault space it covered."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from chaoslight._runtime._protocol import judges_loops
from chaoslight._schedule import Schedule
from chaoslight._search._reach import Reach


@dataclass(frozen=True)
class Coverage:
    """The fault space a campaign could reach, and what it tried of it."""

    reached: int  # (site, step) points the baseline run reached; 0 when none was recorded
    tried: int  # of those, points at least one schedule put a fault on
    examples: int  # schedules run, baseline and replays included
    kinds: dict[str, int] = field(default_factory=dict)  # faults drawn per kind
    # In a loop no Trainer runs: the checks that follow a Trainer's hooks, which saw
    # nothing of it (said once, rather than passing in silence).
    unjudged: tuple[str, ...] = ()
    judged: tuple[str, ...] = ()  # and those whose observers see a loop's own steps
    # (check, why): the checks that said in the baseline run they cannot judge the program
    cannot: tuple[tuple[str, str], ...] = ()

    def line(self) -> str:
        kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(self.kinds.items()))
        where = (
            f"faults at {self.tried} of {self.reached} reached (site, step) points"
            if self.reached
            else f"faults at {self.tried} (site, step) points (no reach was recorded)"
        )
        line = f"explored: {where}; {self.examples} runs; kinds tried: {kinds or 'none'}"
        if self.unjudged:
            also = f", and by {', '.join(self.judged)} at its steps" if self.judged else ""
            line += (
                "\nnote: no Trainer ran (a Fabric or plain PyTorch loop): its steps are its "
                f"optimizer steps; hangs, errors and crashes were judged{also}, but "
                f"{', '.join(self.unjudged)} follow a Trainer's hooks and judged nothing here"
            )
        for check, why in self.cannot:
            line += f"\nnote: {check} could not judge this program: {why}"
        return line


def coverage(
    reach: Reach | None, tried: Iterable[Schedule], checks: Iterable[Any] = ()
) -> Coverage:
    schedules = list(tried)
    points = {(f.site, f.step) for schedule in schedules for f in schedule}
    reached = set(reach.points) if reach is not None else set()
    kinds = Counter(f.kind for schedule in schedules for f in schedule)
    on_reached = len(points & reached) if reached else len(points)
    loop = bool(reach and reach.loop)
    listed = list(checks) if loop else []
    cannot = reach.unjudged if reach is not None else ()
    silent = {check for check, _ in cannot}
    unjudged = tuple(c.name for c in listed if not judges_loops(c))
    judged = tuple(
        c.name
        for c in listed
        if judges_loops(c) and c.observer() is not None and c.name not in silent
    )
    return Coverage(len(reached), on_reached, len(schedules), dict(kinds), unjudged, judged, cannot)
