"""``restart-equivalence`` on loops that no Trainer runs (``_checks/_restart_loops.py``).

Fast: the comparison over recorded facts, built by hand: where it judges (one
deterministic path, resumed past 0) and what it finds (a learning rate, the samples of a
fixed order, the optimizers' state at the end, steps never trained), and where it judges
nothing (a draw, references that disagree, an order the random state chose).
Slow, in the session's 2-rank World: plain DDP loops that resume from their own
checkpoint (``tests/loop_targets.py``): the resume that forgets Adam's state is found,
the correct one is clean, and so are a loop with dropout and one over a RandomSampler,
whose restarted runs end with other weights by design."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from chaoslight import Schedule, judge
from chaoslight._checks._restart_loops import LoopSeen, compare_loops
from chaoslight.checks import RestartEquivalence


def _step(lr: float = 0.1, rows: tuple[int, ...] = (1, 2), fixed: bool = True) -> dict[str, Any]:
    return {"k": "lo", "o": 0, "lr": [lr], "rows": [list(rows)], "x": fixed, "w": False}


def _end(steps: int, weights: float = 1.0) -> dict[str, Any]:
    opt = {"keys": ["exp_avg", "step"], "steps": {"0": float(steps)}, "groups": 1}
    return {"k": "lend", "opt": [opt], "w": [[weights, weights, 7]]}


def _job(
    steps: list[dict[str, Any]], first: int = 0, end: dict[str, Any] | None = None
) -> LoopSeen:
    """One run: ``steps`` from the job's step ``first`` on, counted from 0 in the run
    (a resumed loop's steps restart at 0), on both ranks (rank 1's samples other ones)."""
    seen = LoopSeen()
    for rank in (0, 1):
        seen.steps[rank] = [(index, _shard(facts, rank)) for index, facts in enumerate(steps)]
        seen.end[rank] = end or _end(first + len(steps))
    return seen


def _shard(facts: dict[str, Any], rank: int) -> dict[str, Any]:
    mine = copy.deepcopy(facts)
    mine["rows"] = [[row + 1000 * rank for row in rows] for rows in mine["rows"]]
    return mine


def _reference(n: int = 8) -> list[dict[str, Any]]:
    return [_step(lr=0.1 / (1 + i // 4), rows=(2 * i, 2 * i + 1)) for i in range(n)]


def _restarted(resumed: list[dict[str, Any]], crashed: int = 5, at: int = 4) -> list[LoopSeen]:
    """A crashed run that trained ``crashed`` steps, and the run resumed at ``at``."""
    return [_job(_reference()[:crashed]), _job(resumed, first=at)]


def _compare(runs: list[LoopSeen], references: list[LoopSeen] | None = None) -> Any:
    references = references or [_job(_reference()), _job(_reference())]
    return compare_loops("restart-equivalence", references, runs)


def test_a_resume_that_trains_on_as_an_uninterrupted_run_is_judged_and_passes() -> None:
    result = _compare(_restarted(_reference()[4:]))
    assert result is not None and result.violations() == []


def test_a_learning_rate_that_starts_over_is_found_at_the_job_step() -> None:
    resumed = _reference()[4:]
    resumed[0]["lr"] = [0.1]  # the scheduler was not restored: its first value again
    (violation,) = _compare(_restarted(resumed)).violations()
    assert violation.aspect == "learning-rate" and violation.step == 4
    assert "the restarted run's step 0" in violation.message
    assert "0.1 after the resume, 0.05 uninterrupted" in violation.message


def test_other_samples_in_a_fixed_order_are_found() -> None:
    resumed = _reference()[4:]
    resumed[1]["rows"] = [[0, 1]]  # the first epoch's batch again
    (violation,) = _compare(_restarted(resumed)).violations()
    assert violation.aspect == "samples" and violation.step == 5


def test_an_optimizer_that_starts_over_is_found_at_the_end() -> None:
    runs = _restarted(_reference()[4:])
    runs[-1] = _job(_reference()[4:], end=_end(4))  # Adam counted only the resumed steps
    (violation,) = _compare(runs).violations()
    assert violation.aspect == "optimizer" and "4 after the resume, 8 uninterrupted" in str(
        violation
    )


def test_weights_that_end_elsewhere_on_one_path_are_found() -> None:
    runs = _restarted(_reference()[4:])
    runs[-1] = _job(_reference()[4:], end=_end(8, weights=2.0))
    (violation,) = _compare(runs).violations()
    assert violation.aspect == "weights"


def test_a_resume_past_every_step_trained_before_is_found() -> None:
    runs = _restarted(_reference()[6:], crashed=3, at=6)
    (violation,) = _compare(runs).violations()
    assert violation.aspect == "position" and "never trained" in violation.message


@pytest.mark.parametrize(
    "why",
    ["a draw", "references disagree", "from step 0", "another random order", "longer"],
)
def test_nothing_is_judged_where_a_correct_program_may_differ(why: str) -> None:
    references = [_job(_reference()), _job(_reference())]
    resumed = _reference()[4:]
    if why == "a draw":
        resumed[0]["lr"] = [9.0]
        runs = _restarted(resumed)
        runs[-1].drew[0] = "a backward"
    elif why == "references disagree":
        resumed[0]["lr"] = [9.0]
        runs = _restarted(resumed)
        references[1].steps[0][3][1]["rows"] = [[99, 98]]
    elif why == "from step 0":  # no checkpoint: the restart trains it all again
        runs = [_job(_reference()[:5]), _job(_reference(), end=_end(8, weights=5.0))]
    elif why == "longer":
        runs = [_job(_reference()[:5]), _job(_reference(9))]
    else:  # a RandomSampler's resumed epoch drew another seed: another order
        unfixed = [
            _step(lr=s["lr"][0], rows=tuple(s["rows"][0]), fixed=False) for s in _reference()
        ]
        references = [_job(unfixed), _job(unfixed)]
        resumed = copy.deepcopy(unfixed[4:])
        resumed[0]["rows"] = [[15, 3]]
        runs = [_job(unfixed[:5]), _job(resumed, first=4, end=_end(8, weights=3.0))]
    assert _compare(runs, references) is None


def test_samples_fetched_by_workers_count_only_where_content_names_a_sample() -> None:
    # Workers may augment with a seed the restart changed: a sample's content is its
    # name only where the reference trained on every distinct row equally often, twice.
    once = [dict(_step(rows=(2 * i, 2 * i + 1)), w=True) for i in range(8)]
    resumed = copy.deepcopy(once[4:])
    resumed[0]["rows"] = [[70, 71]]
    runs = [_job(once[:5]), _job(resumed, first=4)]
    assert _compare(runs, [_job(once), _job(once)]) is None
    twice = [dict(_step(rows=(2 * (i % 4), 2 * (i % 4) + 1)), w=True) for i in range(8)]
    resumed = copy.deepcopy(twice[4:])
    resumed[0]["rows"] = [[2, 3]]
    runs = [_job(twice[:5]), _job(resumed, first=4)]
    (violation,) = _compare(runs, [_job(twice), _job(twice)]).violations()
    assert violation.aspect == "samples"


TIMEOUT = 60.0
RESTART = "restarts 1\ncrash@torch.optimizer_step rank=0 step=5"  # resumed at step 4


def _run(world2: Any, target: str, schedule: str = RESTART) -> Any:
    return world2.run(
        f"loop_targets:{target}",
        Schedule.parse(schedule),
        timeout=TIMEOUT,
        checks=[RestartEquivalence()],
    )


@pytest.mark.slow
def test_a_resume_that_forgets_adams_state_is_found_and_the_fixed_one_is_clean(
    world2: Any,
) -> None:
    buggy = _run(world2, "resumable_adam_forgets_its_state")
    (violation,) = buggy.violations
    assert violation.check == "restart-equivalence" and violation.aspect == "optimizer"
    assert "4 after the resume, 8 uninterrupted" in violation.message
    verdict = judge(buggy)
    assert verdict.failed and verdict.known is None, buggy.report()
    fixed = _run(world2, "resumable_adam")
    assert fixed.passed and not fixed.violations, fixed.report()


@pytest.mark.slow
@pytest.mark.parametrize("target", ["resumable_dropout", "resumable_random_order"])
def test_a_resume_whose_run_the_random_state_changes_is_not_a_finding(
    world2: Any, target: str
) -> None:
    # Dropout draws other masks after the restart; a RandomSampler's resumed second
    # epoch draws another order: the weights end elsewhere, and nothing is wrong.
    outcome = _run(world2, target, "restarts 1\ncrash@torch.optimizer_step rank=0 step=11")
    assert outcome.passed and not outcome.violations, outcome.report()
