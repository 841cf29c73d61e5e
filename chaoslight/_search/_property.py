"""What counts as a failure in a search, for each mode."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chaoslight._runtime._events import FIRED
from chaoslight._runtime._evidence import Violation

SURVIVE, FAIL_CLEANLY = "survive", "fail-cleanly"
MODES = (SURVIVE, FAIL_CLEANLY)
HARD_PREFIXES = ("oom@", "raise@", "crash@", "drop_sync@")


@dataclass
class Verdict:
    """One example's result as the search sees it."""

    failed: bool
    reason: str
    status: str
    violations: list[Violation] = field(default_factory=list)
    fired: tuple[tuple[int, str], ...] = ()  # (rank, fault), sorted: ranks race in time

    def signature(self) -> tuple[Any, ...]:
        """What must repeat for a failure to count as reproduced (not flaky)."""
        return (self.failed, self.status, tuple(v.check for v in self.violations))


def verdict(outcome: Any, violations: list[Violation], mode: str) -> Verdict:
    """Judge one outcome: ``survive`` needs a pass; ``fail-cleanly`` needs a prompt error.

    In ``fail-cleanly`` mode a run that hangs fails, and so does one that passes although
    a hard fault (OOM, raised error, crash, dropped sync) fired: the error was swallowed.
    """
    fired = tuple(sorted((e.rank, e.fault) for e in outcome.events if e.kind == FIRED))
    if violations:
        return Verdict(
            True, "; ".join(str(v) for v in violations), outcome.status, violations, fired
        )
    if mode == SURVIVE:
        ok = outcome.status == "passed"
        return Verdict(not ok, "" if ok else outcome.summary(), outcome.status, [], fired)
    if outcome.status == "hung":
        return Verdict(True, outcome.summary(), outcome.status, [], fired)
    swallowed = [f for _, f in fired if f.startswith(HARD_PREFIXES)]
    if outcome.status == "passed" and swallowed:
        reason = f"passed although {swallowed[0]} fired: the error was swallowed"
        return Verdict(True, reason, outcome.status, [], fired)
    return Verdict(False, "", outcome.status, [], fired)
