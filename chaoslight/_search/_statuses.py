"""A campaign's two vocabularies: how it ended (``CampaignStatus``, a result's status and
a failure file's) and what it is doing (``CampaignPhase``, for the display). Below both
``_campaign`` and ``_failure``, which speak them."""

from __future__ import annotations

from chaoslight._schedule import Vocabulary


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
