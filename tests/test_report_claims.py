"""A report never contradicts itself: every claim a verdict and a campaign make is one the
run's own record supports (``tests/report_claims.py``), on recorded runs and on the
default search's findings on the examples."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from outcome_records import recorded
from report_claims import campaign_contradictions, contradictions

import chaoslight
from chaoslight import judge

RECORDED = recorded()


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_a_recorded_runs_verdict_claims_only_what_its_record_shows(name: str) -> None:
    outcome = RECORDED[name]
    assert contradictions(judge(outcome), outcome) == []


def test_the_checker_finds_a_claim_the_record_does_not_support() -> None:
    """A note that says a fault which fired never fired, and a reason naming a fault that
    never fired, are both caught (the checker is not vacuous)."""
    outcome = RECORDED["swallowed_oom"]
    verdict = judge(outcome)
    fired = verdict.fired[0][1]
    wrong = replace(
        verdict,
        notes=(f"{fired} never fired: rank 1 never reached its site",),
        reason="the injected oom@lightning.forward rank=0 step=9 fired at step 9",
    )
    found = contradictions(wrong, outcome)
    assert len(found) == 2 and "never fired, and it fired" in found[1], found


@pytest.mark.slow
@pytest.mark.parametrize(
    "target",
    [
        "examples/planted/swallowed_oom.py:train",
        "examples/planted/two_rank_skips.py:train",
        "examples/catalogue/shared_file.py:train_buggy",
    ],
)
def test_the_default_searchs_findings_claim_only_what_their_runs_show(
    world2: Any, target: str
) -> None:
    """The default search on buggy examples: the finding's report (its verdict, its
    minimal schedule, its replays) says nothing its own runs contradict."""
    result, failure = chaoslight.fuzz(target, world=world2, max_examples=25, seed=1, max_time=60)
    assert failure is not None and result.verdict is not None, result.status
    assert campaign_contradictions(result) == []
    assert contradictions(result.verdict, result.outcome) == []
