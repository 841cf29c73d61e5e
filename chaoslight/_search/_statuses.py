"""How a campaign ended and what it is doing: its two vocabularies (``CampaignStatus``, a
result's status and a failure file's; ``CampaignPhase``, for the display), its live
counters (``Progress``) and its result (``Result``). Below both ``_campaign`` and
``_failure``, which speak them."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from chaoslight._schedule import Schedule, Vocabulary
from chaoslight._verdict._known import KnownFinding
from chaoslight._verdict._result import Verdict


class CampaignStatus(Vocabulary):
    """How a campaign ended (``Result.status``). A ``str``, as ``Status`` is: it equals,
    prints and serialises as its value, so failure files and messages read as before."""

    CLEAN = "clean"  # nothing found
    FOUND = "failed"  # a minimal failing schedule, reproduced by every replay
    FLAKY = "flaky"  # a failure some replay did not reproduce
    BASELINE = "fails-without-faults"  # the empty schedule already fails
    # The empty schedule fails in some runs only: a race of the program's own. A finding
    # (a CI job must not stay green on it), with its rate and, when a delay makes it fail
    # every time, that delay as the schedule.
    FLAKY_BASELINE = "flaky-without-faults"
    INTERNAL_ERROR = "internal-error"  # chaoslight itself raised: not a finding


CLEAN, FOUND, FLAKY, BASELINE, FLAKY_BASELINE, INTERNAL_ERROR = (
    CampaignStatus.CLEAN,
    CampaignStatus.FOUND,
    CampaignStatus.FLAKY,
    CampaignStatus.BASELINE,
    CampaignStatus.FLAKY_BASELINE,
    CampaignStatus.INTERNAL_ERROR,
)


class CampaignPhase(Vocabulary):
    """What a campaign is doing now (``Progress.phase``), in the order it does it."""

    BASELINE = "baseline"  # the empty schedule, twice
    GENERATING = "generating"  # stored failures, probes, then Hypothesis's search
    SHRINKING = "shrinking"  # Hypothesis shrinks the first failure
    MINIMISING = "minimising"  # unfired and unneeded faults dropped, delays shortened
    REPLAYING = "replaying"  # the minimal schedule run again


@dataclass
class Progress:
    """Live counters of a campaign, for the display."""

    phase: CampaignPhase = CampaignPhase.GENERATING
    examples: int = 0
    failures: int = 0  # failures found (1 once one is; shrinking's reruns do not count)
    started: float = field(default_factory=time.monotonic)

    @property
    def per_minute(self) -> float:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        return self.examples * 60.0 / elapsed


@dataclass
class Result:
    """How a campaign ended: clean, a minimal failing schedule, or a flaky one."""

    status: CampaignStatus
    schedule: Schedule | None = None
    verdict: Verdict | None = None
    outcome: Any = None
    replays: list[Verdict] = field(default_factory=list)
    examples: int = 0
    wall_s: float = 0.0
    tried: list[Schedule] = field(default_factory=list, repr=False)
    coverage: Any = None  # what the search explored (``_coverage.Coverage``), when known
    known: list[KnownFinding] = field(default_factory=list)  # framework bugs met, once each

    # (failed, runs) of the empty schedule, for a target that fails without faults: the
    # two baseline runs and the empty schedule's replays.
    no_fault_rate: tuple[int, int] | None = None

    def rate_line(self) -> str:
        """'failed in 3 of 4 runs with no fault', or '' when the baseline passed."""
        if self.no_fault_rate is None:
            return ""
        failed, runs = self.no_fault_rate
        return f"failed in {failed} of {runs} runs with no fault"

    @property
    def minimal(self) -> bool:
        """Shrunk and 1-minimal (every fault needed): only a reproduced failure is."""
        return self.status == FOUND
