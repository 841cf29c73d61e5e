"""``restart-equivalence``: a restarted job trains as an uninterrupted fault-free run would,
in what the random state cannot change; judged only when the job restarted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chaoslight import Event, Schedule, judge
from chaoslight._checks._reruns import faults_leave_training_alone
from chaoslight._runtime._events import FIRED
from chaoslight._runtime._evidence import OBSERVATION
from chaoslight.checks import Evidence, RankView, RestartEquivalence, check_by_name

NAME = RestartEquivalence.name
PER_EPOCH = 4  # batches per epoch and rank in the synthetic runs
CRASH = "crash@lightning.training_step rank=0 step=6"
RESTART = Schedule.parse(f"restarts 1\n{CRASH}")


def _event(rank: int, facts: dict[str, Any], kind: str = OBSERVATION, fault: str = "") -> Event:
    return Event(kind, NAME, rank, None, 0.0, 0.0, fault, 0, json.dumps(facts))


def _rows(step: int, rank: int) -> list[int]:
    """A fixed order, the same samples every epoch (content identifies a sample)."""
    index = step % PER_EPOCH
    return [1000 * index + 10 * rank + j for j in range(2)]


def _fit(
    start: int,
    stop: int,
    rate: Any = lambda step: 0.01,
    *,
    end: dict[str, Any] | None = None,
    rows: Any = _rows,
    shift: int = 0,
    **start_facts: Any,
) -> list[Event]:
    """One fit on two ranks from global step ``start`` to ``stop`` (its end facts when
    ``end`` is given), as the observer records it; ``shift`` batches ahead in the data."""
    events = []
    for rank in (0, 1):
        facts = {"k": "start", "f": 0, "g": start, "e": start // PER_EPOCH, "n": PER_EPOCH}
        facts |= {"acc": 1, "resumable": False, "fixed": True, "private": False}
        facts |= {"plateau": False, "monitors": [], "timer": False, **start_facts}
        events.append(_event(rank, facts))
        for step in range(start, stop):
            at = step + shift
            place = {"e": at // PER_EPOCH, "i": at % PER_EPOCH, "g": step, "rows": rows(at, rank)}
            events.append(_event(rank, {"k": "batch", "f": 0, **place, "lr": []}))
            events.append(_event(rank, {"k": "lr", "f": 0, "lr": [[step, 0, [rate(step)]]]}))
        if end is not None:
            facts = {"k": "end", "f": 0, "g": stop, "e": stop // PER_EPOCH, "stop": False}
            facts |= {"loop": {}, "cb": {}, "opt": [], **end}
            events.append(_event(rank, facts))
    return events


def _drew() -> list[Event]:
    return [_event(rank, {"k": "drew", "f": 0, "at": "a training step"}) for rank in (0, 1)]


def _passed(events: list[Event], schedule: Any = None, **kwargs: Any) -> Evidence:
    ranks = {rank: RankView(rank, "passed") for rank in (0, 1)}
    return Evidence(events, ranks, schedule, **kwargs)


def _crashed(events: list[Event]) -> Evidence:
    fired = Event(FIRED, "lightning.training_step", 0, 6, 0.0, 0.0, CRASH, 1)
    return Evidence([*events, fired], {0: RankView(0, "crashed"), 1: RankView(1, "failed")})


def _judge(reference: list[Event], first: list[Event], last: list[Event]) -> list[Any]:
    """The check's verdict on a job (``first`` crashed, ``last`` passed) against
    ``reference``, the fault-free run its rerun returns."""
    check = RestartEquivalence()
    job = _passed(last, RESTART, attempts=(_crashed(first),))
    return check.judge_reruns(job, lambda *a, **k: _passed(reference, Schedule()), Path("."))


def _messages(violations: list[Any], warning: bool = False) -> list[str]:
    return [v.message for v in violations if v.warning == warning]


END = {"opt": [{"keys": ["momentum_buffer"], "steps": {}, "groups": 1}]}


def test_a_learning_rate_that_restarts_is_named_with_its_step_and_both_values() -> None:
    """A warm-up counter lost on restart: the first step after the resume, both rates."""
    warm = lambda step: 0.01 * min(step + 1, 4)  # noqa: E731
    reference = _fit(0, 12, warm, end=END)
    resumed = _fit(4, 12, lambda step: warm(step - 4), end=END)
    found = _judge(reference, _fit(0, 7, warm), resumed)
    assert _messages(found) == [
        "learning rate of group 0 at step 4: 0.01 after the resume, 0.04 uninterrupted"
    ]
    assert found[0].rank == 0 and found[0].step == 4 and "state_dict" in found[0].cause


def test_the_same_rates_and_samples_after_the_resume_are_clean() -> None:
    """A correct resume from the epoch-end checkpoint: nothing to report."""
    reference = _fit(0, 12, end=END)
    assert _judge(reference, _fit(0, 7), _fit(4, 12, end=END)) == []


def test_rates_a_plateau_scheduler_may_set_from_random_metrics_are_not_judged() -> None:
    """A program that draws random numbers and has a ReduceLROnPlateau: a warning only."""
    reference = _fit(0, 12, end=END, plateau=True) + _drew()
    resumed = _fit(4, 12, lambda step: 0.005, end=END, plateau=True) + _drew()
    found = _judge(reference, _fit(0, 7, plateau=True) + _drew(), resumed)
    assert _messages(found) == [] and "not judged" in _messages(found, warning=True)[0]
    assert "ReduceLROnPlateau" in found[0].cause


def test_samples_of_a_fixed_order_that_differ_after_the_resume_fail() -> None:
    """A sampler whose epoch is not restored: the step, the rank, what repeated."""
    replay = lambda step, rank: _rows(step - 1 if step >= 5 else step, rank)  # noqa: E731
    reference = _fit(0, 12, end=END)
    found = _judge(reference, _fit(0, 7), _fit(4, 12, end=END, rows=replay))
    assert _messages(found) == [
        "rank 0 trained other samples at step 5 (epoch 1, batch 1) after the resume: 2 of "
        "its 2 samples are not the uninterrupted run's; it had trained 2 of them already "
        "since the resume"
    ]


def test_samples_are_not_judged_where_content_may_be_augmented() -> None:
    """Content that differs in every epoch (augmentation) identifies no sample: no verdict."""
    fresh = lambda step, rank: [step * 100 + rank]  # noqa: E731
    shifted = lambda step, rank: [step * 100 + rank + 7]  # noqa: E731
    reference = _fit(0, 12, end=END, rows=fresh)
    assert _judge(reference, _fit(0, 7, rows=fresh), _fit(4, 12, end=END, rows=shifted)) == []


def test_a_mid_epoch_resume_of_a_plain_loader_is_a_warning_in_lightnings_words() -> None:
    """Resumed at step 6 (mid-epoch) with a loader Lightning cannot resume: a warning."""
    replay = lambda step, rank: _rows(step - 6, rank)  # noqa: E731
    reference = _fit(0, 12, end=END)
    found = _judge(reference, _fit(0, 7), _fit(6, 12, end=END, rows=replay))
    assert _messages(found) == []
    assert _messages(found, warning=True) == [
        "the ranks trained other samples after a mid-epoch resume at step 6"
    ]
    assert "dataloader is not resumable" in found[0].cause


def test_a_resume_that_skips_the_rest_of_an_epoch_is_named() -> None:
    """The resumed fit starts the next epoch at step 2: two batches were never trained."""
    reference = _fit(0, 8, end=END)
    found = _judge(reference, _fit(0, 3), _fit(2, 6, end=END, shift=2))
    assert _messages(found)[0] == (
        "the fit resumed at step 2 with epoch 1 batch 0, where the uninterrupted run "
        "trained epoch 0 batch 2: the resume skipped 2 batches"
    )


def test_a_job_that_ends_early_fails_unless_a_callback_stopped_a_random_program() -> None:
    """The final global step must match; a metric-driven stop of a program that draws
    random numbers may legitimately come elsewhere."""
    reference = _fit(0, 12, end=END)
    found = _judge(reference, _fit(0, 7), _fit(4, 10, end=END))
    assert _messages(found) == [
        "global_step at the end of fit 0: 10 after the resume, 12 uninterrupted"
    ]
    stopped = {**END, "stop": True}
    random_reference = _fit(0, 12, end=END) + _drew()
    random_resumed = _fit(4, 10, end=stopped) + _drew()
    assert _judge(random_reference, _fit(0, 7) + _drew(), random_resumed) == []


def state(steps: int, mean: float) -> dict[str, Any]:
    """End facts with a callback holding a counter and a float."""
    leaves = {"steps": steps, "mean": mean}
    return {**END, "cb": {"WarmUp": {"leaves": leaves, "metric": False}}}


def adam(step: float) -> dict[str, Any]:
    """End facts with Adam's per-parameter step counts."""
    return {"opt": [{"keys": ["exp_avg", "step"], "steps": {"0": step, "1": step}, "groups": 1}]}


def test_callback_counters_are_compared_and_random_floats_are_not() -> None:
    """A callback's whole-number counter must match; a float of a program that draws
    random numbers may not."""
    reference = _fit(0, 12, end=state(12, 0.5)) + _drew()
    found = _judge(reference, _fit(0, 7) + _drew(), _fit(4, 12, end=state(8, 0.5)) + _drew())
    assert _messages(found) == [
        "callback WarmUp state 'steps' at the end: 8 after the resume, 12 uninterrupted"
    ]
    assert _judge(reference, _fit(0, 7) + _drew(), _fit(4, 12, end=state(12, 0.7)) + _drew()) == []


def test_optimizer_step_counts_must_match() -> None:
    """Adam's step per parameter after the resume: an optimizer state not restored."""
    reference = _fit(0, 12, end=adam(12.0))
    found = _judge(reference, _fit(0, 7), _fit(4, 12, end=adam(8.0)))
    assert _messages(found) == [
        "optimizer 0 step count of parameter 0 at the end: 8 after the resume, 12 uninterrupted"
    ]


def _weights(total: float) -> dict[str, Any]:
    return {**END, "w": {"names": ["layer.weight"], "sums": [[total, total, 7]]}}


def test_weights_are_compared_only_when_no_run_draws_random_numbers() -> None:
    """Deterministic: other final weights fail, once a second fault-free run agrees with
    the first. With dropout (draws), the same difference is not judged."""
    reference = _fit(0, 12, end=_weights(1.0))
    found = _judge(reference, _fit(0, 7), _fit(4, 12, end=_weights(1.5)))
    assert _messages(found)[0].startswith("parameter 'layer.weight' ends differently")
    drawing = _fit(0, 12, end=_weights(1.0)) + _drew()
    assert _judge(drawing, _fit(0, 7) + _drew(), _fit(4, 12, end=_weights(1.5)) + _drew()) == []


def test_weights_are_not_judged_when_two_fault_free_runs_disagree() -> None:
    """Nondeterministic kernels: the references themselves end apart, so no verdict."""
    check = RestartEquivalence()
    references = iter([_fit(0, 12, end=_weights(1.0)), _fit(0, 12, end=_weights(1.25))])
    job = _passed(_fit(4, 12, end=_weights(1.5)), RESTART, attempts=(_crashed(_fit(0, 7)),))
    rerun = lambda *a, **k: _passed(next(references), Schedule())  # noqa: E731
    assert check.judge_reruns(job, rerun, Path(".")) == []


def _no_rerun(*args: Any, **kwargs: Any) -> Evidence:
    raise AssertionError("a run the check does not judge must cost no rerun")


def test_a_run_without_a_restart_is_not_judged_and_costs_no_rerun() -> None:
    """A plain run (no attempts), or a restart that trained from step 0, is not judged."""
    check = RestartEquivalence()
    plain = _passed(_fit(0, 12, end=END), Schedule.parse(CRASH))
    assert check.judge_reruns(plain, _no_rerun, Path(".")) == []
    scratch = _passed(_fit(0, 12, end=END), RESTART, attempts=(_crashed(_fit(0, 7)),))
    assert check.judge_reruns(scratch, _no_rerun, Path(".")) == []


def test_a_fault_the_program_may_recover_from_leaves_the_job_unjudged() -> None:
    """An OOM the program may catch (a skipped batch) before the crash: not judged."""
    oom = "oom@lightning.forward rank=1 step=1"
    first = _crashed(_fit(0, 7))
    first.events.append(Event(FIRED, "lightning.forward", 1, 1, 0.0, 0.0, oom, 1))
    job = _passed(
        _fit(4, 12, end=END), Schedule.parse(f"restarts 1\n{CRASH}\n{oom}"), attempts=(first,)
    )
    assert not faults_leave_training_alone(job)
    assert RestartEquivalence().judge_reruns(job, _no_rerun, Path(".")) == []
    crash_only = _passed(_fit(4, 12, end=END), RESTART, attempts=(_crashed(_fit(0, 7)),))
    assert faults_leave_training_alone(crash_only)


def test_the_check_is_found_by_its_name() -> None:
    """restart-equivalence builds from its stable name, as --check and failure files do."""
    assert isinstance(check_by_name(NAME), RestartEquivalence)


# In a World: the planted pairs, two restart cycles, correct programs that restart.

RESTART_DIR = "examples/restart/"
CRASH_IN_EPOCH_2 = Schedule.parse(f"restarts 1\n{CRASH}")
TWO_CYCLES = Schedule.parse(f"restarts 2\n{CRASH}\ncrash@lightning.training_step rank=1 step=9")


def _run(world: Any, target: str, schedule: Schedule = CRASH_IN_EPOCH_2) -> Any:
    outcome = world.run(RESTART_DIR + target, schedule, timeout=30, checks=[RestartEquivalence()])
    assert outcome.attempts, "the job did not restart"
    return judge(outcome)


@pytest.mark.slow
@pytest.mark.parametrize("pair", ["warmup_counter", "hand_scheduler"])
def test_a_planted_restart_bug_is_found_and_its_fixed_twin_is_clean(world2: Any, pair: str) -> None:
    """Crash mid-epoch 2, restart: the buggy twin's rates differ after the resume."""
    buggy = _run(world2, f"{pair}.py:train_buggy")
    assert buggy.failed and "learning rate of group 0 at step" in buggy.reason, buggy.reason
    fixed = _run(world2, f"{pair}.py:train_fixed")
    assert not fixed.failed, fixed.reason


@pytest.mark.slow
def test_two_crash_and_restart_cycles_are_judged(world2: Any) -> None:
    """Two crashes, two restarts: the fixed warm-up is clean, the buggy one found."""
    assert not _run(world2, "warmup_counter.py:train_fixed", TWO_CYCLES).failed
    buggy = _run(world2, "warmup_counter.py:train_buggy", TWO_CYCLES)
    assert buggy.failed and "restart-equivalence" in buggy.reason


@pytest.mark.slow
@pytest.mark.parametrize(
    "shape",
    ["per_epoch_scheduler", "accumulate_onecycle", "plateau_early_stop", "deterministic_adam"],
)
def test_a_correct_program_that_restarts_is_clean(world2: Any, shape: str) -> None:
    """Dropout, a per-epoch scheduler with epoch-end checkpoints, accumulation, metric-
    driven schedules, a deterministic program whose weights are compared: all clean."""
    verdict = _run(world2, f"resume_shapes.py:{shape}")
    assert not verdict.failed, verdict.reason


@pytest.mark.slow
def test_a_mid_epoch_resume_of_a_plain_loader_is_only_a_warning(world2: Any) -> None:
    """Checkpoints every 3 steps: the resume replays the epoch's start, Lightning warns."""
    verdict = _run(world2, "resume_shapes.py:mid_epoch_checkpoint")
    assert not verdict.failed, verdict.reason
    assert any("mid-epoch resume" in note for note in verdict.notes), verdict.notes


@pytest.mark.slow
def test_the_default_search_with_the_check_finds_the_warm_up_counter(world2: Any) -> None:
    """Default fuzz: a crash, a restart, the rates differ (the fixed twin is judged clean
    under the same kind of schedule by the pairs test above)."""
    import chaoslight
    from chaoslight._search._failure import DEFAULT_CHECKS

    checks = [*DEFAULT_CHECKS, NAME] if NAME not in DEFAULT_CHECKS else list(DEFAULT_CHECKS)
    options = {"seed": 0, "replays": 0, "checks": checks, "world": world2}
    buggy, _ = chaoslight.fuzz(
        RESTART_DIR + "warmup_counter.py:train_buggy", max_examples=10, max_time=400, **options
    )
    assert buggy.status == "failed" and buggy.schedule.restarts == 1, buggy.verdict
    assert "learning rate of group 0" in buggy.verdict.reason


def test_a_plain_list_dataset_holds_no_private_generator() -> None:
    """A list is a valid map-style dataset: looking for generators in it is no error."""
    import torch
    from torch.utils.data import DataLoader

    from chaoslight._checks._restart_facts import private_generators

    loader = DataLoader([torch.zeros(2), torch.ones(2)], batch_size=1)
    assert private_generators(torch.nn.Linear(2, 1), [loader]) is False

    class Holder(torch.utils.data.Dataset):  # type: ignore[type-arg]
        """A dataset with its own generator: its draws restart from the seed."""

        def __init__(self) -> None:
            self.rng = torch.Generator()

    assert private_generators(torch.nn.Linear(2, 1), [DataLoader(Holder())]) is True
