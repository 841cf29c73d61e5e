"""Lightning's silent bugs as known issues, matched by their documented shape only: the
damage a check sees (replicas apart, a resumed job a step ahead), the release and the
program shape the ranks recorded of themselves (``framework-facts``), and nothing but
benign faults. The same check failing on an affected release in another shape, without
the facts, or on a fixed release stays the program's. The releases themselves are tried
by ``benchmarks/known_issue_releases.py`` (network, minutes)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import lightning
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from chaoslight import Event, Outcome, Schedule, judge
from chaoslight._checks._facts import FACTS, framework_facts
from chaoslight._report import FAILED, HUNG, PASSED, RELEASED
from chaoslight._report._records import ExceptionInfo, RankResult
from chaoslight._runtime import FIRED
from chaoslight._runtime._evidence import OBSERVATION
from chaoslight._verdict._known import match_known
from chaoslight.checks import FrameworkFacts, Violation

STATIC = "lightning-static-graph-manual-sync"
RESUME = "lightning-resume-repeats-batch"
MANUAL_STATIC: dict[str, Any] = {"automatic_optimization": False, "static_graph": True}
BATCH_END_RESUME: dict[str, Any] = {"resumed": True, "processed": 7, "completed": 6}


def facts(version: str, *, package: str = "lightning", **shape: Any) -> dict[str, Any]:
    """One rank's framework facts: a fresh fit with automatic optimization, unless told."""
    base = {
        "package": package,
        "version": version,
        "automatic_optimization": True,
        "static_graph": False,
        "resumed": False,
        "processed": 0,
        "completed": 0,
    }
    return {**base, **shape}


def event(
    kind: str, site: str, rank: int, step: int | None, detail: str = "", fault: str = ""
) -> Event:
    return Event(kind, site, rank, step, 1.0, 1.0, fault, 0, detail)


def run(
    per_rank: list[dict[str, Any]] | None,
    violations: list[Violation],
    first_step: int = 0,
    fired: str = "",
) -> Outcome:
    """Two ranks that passed, their facts (none when ``per_rank`` is None), replicas-in-sync
    observations from ``first_step`` on, the violations the checks returned."""
    events = [
        event(OBSERVATION, FACTS, r, first_step, json.dumps(f))
        for r, f in enumerate(per_rank or [])
    ]
    events += [
        event(OBSERVATION, "replicas-in-sync", r, s, "{}")
        for r in (0, 1)
        for s in (first_step, first_step + 1)
    ]
    if fired:
        events.append(event(FIRED, "lightning.training_step", 0, first_step, fault=fired))
    ranks = (RankResult(0, PASSED), RankResult(1, PASSED))
    schedule = Schedule.parse(fired) if fired else Schedule()
    return Outcome(FAILED, ranks, events, 1.0, schedule, "t.py:train", 60.0, tuple(violations))


def apart(step: int = 0) -> Violation:
    return Violation("replicas-in-sync", "parameter 'layer.weight' differs", rank=1, step=step)


def ahead() -> Violation:
    return Violation(
        "restart-equivalence",
        "global_step at the end: 13 after the resume, 12 uninterrupted",
        aspect="end",
    )


def key(outcome: Outcome) -> str | None:
    found = match_known(outcome)
    return None if found is None else found.issue.key


@pytest.mark.parametrize("version", ["2.0.0", "2.4.0", "2.5.6"])
def test_replicas_apart_at_the_first_step_under_manual_static_graph_is_lightnings(
    version: str,
) -> None:
    """Manual optimization with DDP's static graph, replicas apart at the first step: #21251."""
    outcome = run([facts(version, **MANUAL_STATIC)] * 2, [apart()])
    found = match_known(outcome)
    assert found is not None
    issue, package, seen = found.issue, found.package, found.version
    assert (issue.key, package, seen) == (STATIC, "lightning", version)
    assert "21251" in issue.reference and "static_graph" in issue.workaround


def test_the_first_step_of_a_resumed_fit_counts_as_its_first() -> None:
    """A resumed fit under the same shape parts at the first step it trains (its own first)."""
    assert key(run([facts("2.5.6", **MANUAL_STATIC)] * 2, [apart(step=8)], first_step=8)) == STATIC


@pytest.mark.parametrize(
    "outcome",
    [
        pytest.param(run([facts("2.6.0", **MANUAL_STATIC)] * 2, [apart()]), id="fixed-release"),
        pytest.param(run([facts("2.5.6")] * 2, [apart()]), id="automatic-optimization"),
        pytest.param(
            run([facts("2.5.6", automatic_optimization=False)] * 2, [apart()]), id="dynamic-graph"
        ),
        pytest.param(
            run([facts("2.5.6", **MANUAL_STATIC)] * 2, [apart(step=3)]), id="parted-later"
        ),
        pytest.param(run(None, [apart()]), id="no-facts"),
        pytest.param(
            run([facts("2.5.6", **MANUAL_STATIC)], [apart()]), id="one-rank-without-facts"
        ),
        pytest.param(
            run([facts("2.5.6", **MANUAL_STATIC), facts("2.6.0", **MANUAL_STATIC)], [apart()]),
            id="ranks-disagree-on-release",
        ),
        pytest.param(
            run(
                [facts("2.5.6", **MANUAL_STATIC)] * 2,
                [apart(), Violation("finite-loss", "the loss is nan", rank=0, step=2)],
            ),
            id="another-check-fails-too",
        ),
        pytest.param(
            run(
                [facts("2.5.6", **MANUAL_STATIC)] * 2,
                [apart()],
                fired="corrupt@dist.all_reduce rank=1 step=0",
            ),
            id="a-desync-fault-fired",
        ),
    ],
)
def test_replicas_apart_in_another_shape_stay_the_programs(outcome: Outcome) -> None:
    """A fixed release, automatic optimization, a dynamic graph, replicas that part later,
    missing or disagreeing facts: the program's. Beside another failing check the issue
    claims its own violation and the other check's is the program's; under a desync fault
    the fault explains the replicas (no issue is credited)."""
    verdict = judge(outcome)
    assert verdict.known is None
    if verdict.failed:
        assert verdict.findings, verdict.accounts
        assert all(a.symptom.violation not in _claimed(verdict) for a in verdict.findings)


def _claimed(verdict: Any) -> list[Violation]:
    return [v for claim in verdict.claims for v in claim.claimed.violations]


@pytest.mark.parametrize("version", ["2.1.0", "2.4.0"])
def test_a_resume_from_a_batch_end_checkpoint_a_step_ahead_is_lightnings(version: str) -> None:
    """Resumed from a checkpoint written in on_train_batch_end, restart-equivalence fails:
    Lightning PR #20379 on 2.0-2.4.0."""
    outcome = run([facts(version, **BATCH_END_RESUME)] * 2, [ahead()], first_step=7)
    found = match_known(outcome)
    assert found is not None and found.issue.key == RESUME
    assert "20379" in found.issue.reference and "epoch ends" in found.issue.workaround


@pytest.mark.parametrize(
    "outcome",
    [
        pytest.param(run([facts("2.5.0", **BATCH_END_RESUME)] * 2, [ahead()]), id="fixed-release"),
        pytest.param(
            run([facts("2.4.0", resumed=True, processed=8, completed=8)] * 2, [ahead()]),
            id="epoch-end-checkpoint",
        ),
        pytest.param(run([facts("2.4.0")] * 2, [ahead()]), id="not-resumed"),
        pytest.param(
            run([facts("2.4.0", **BATCH_END_RESUME)] * 2, [ahead(), apart(step=8)]),
            id="replicas-apart-too",
        ),
    ],
)
def test_a_restart_difference_in_another_shape_stays_the_programs(outcome: Outcome) -> None:
    """A fixed release, an epoch-end checkpoint, a run that did not resume: the program's
    own finding. Beside another failing check the issue claims only its own violation, and
    the other check's is the program's finding; an error that fired in the resumed run
    changes nothing of what the issue explains."""
    verdict = judge(outcome)
    assert verdict.failed and verdict.known is None, verdict.accounts
    assert all(a.symptom.violation not in _claimed(verdict) for a in verdict.findings)


@pytest.mark.usefixtures("lightning_in_process")
def test_framework_facts_record_the_release_and_shape_a_fit_runs(tmp_path: Any) -> None:
    """The facts observer records the Lightning that runs, manual optimization and a fresh start."""
    import lightning.pytorch as pl

    seen: list[dict[str, Any]] = []

    class Manual(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch: Any, batch_idx: int) -> None:
            optimizer: Any = self.optimizers()
            self.manual_backward(self.layer(batch[0]).sum())
            optimizer.step()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def on_train_start(self) -> None:
            seen.append(framework_facts(self.trainer, self))

    trainer = pl.Trainer(
        default_root_dir=tmp_path,
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[FrameworkFacts().observer()],
    )
    trainer.fit(Manual(), DataLoader(TensorDataset(torch.ones(4, 2)), batch_size=2))
    loader = {"train_batches": 2, "train_workers": 0, "train_set_epoch": False}
    assert seen == [
        facts(
            lightning.__version__,
            automatic_optimization=False,
            val_check_seconds=None,
            global_step=0,
            **loader,
        )
    ]


# -- max_steps and an epoch-end checkpoint: FitLoop.on_run_start (PR #12821) -----------------

ITERATION = "lightning-iteration-resume-epoch-end"
CRASH = "crash@lightning.training_step rank=0 step=6"
# Resumed at step 4 from last.ckpt written in on_train_epoch_end of epoch 0, under max_steps.
EPOCH_END_BY_STEPS: dict[str, Any] = {
    "resumed": True,
    "processed": 4,
    "completed": 4,
    "max_steps": 10,
    "epoch_processed": 1,
    "epoch_completed": 0,
}


def misplaced() -> Violation:
    return Violation(
        "restart-equivalence",
        "the fit resumed at step 4 with epoch 0 batch 4, which the uninterrupted run counts "
        "as epoch 1 batch 0",
        rank=0,
        step=4,
        aspect="position",
    )


def wrong_rate() -> Violation:
    return Violation(
        "restart-equivalence",
        "learning rate of group 0 at step 4: 0.0125 after the resume, 0.0625 uninterrupted",
        rank=0,
        step=4,
        aspect="learning-rate",
    )


def restarted(
    shape: dict[str, Any],
    violations: list[Violation],
    version: str = "2.6.6",
    before: str = CRASH,
    fired: str = "",
) -> Outcome:
    """A job that ran once (``before`` fired there), restarted and resumed with ``shape``."""
    first = run([facts(version)] * 2, [], fired=before)
    last = run([facts(version, **shape)] * 2, violations, first_step=4, fired=fired)
    return replace(last, attempts=(first,), schedule=Schedule.parse(f"restarts 1\n{before}"))


@pytest.mark.parametrize("version", ["2.4.0", "2.5.0", "2.6.6"])
def test_an_epoch_end_resume_under_max_steps_that_lands_wrong_is_lightnings(version: str) -> None:
    """max_steps, resumed from an epoch-end checkpoint, only restart-equivalence fails: known."""
    found = match_known(restarted(EPOCH_END_BY_STEPS, [misplaced()], version))
    assert found is not None and found.issue.key == ITERATION
    assert "12821" in found.issue.reference and "every_n_train_steps" in found.issue.workaround


def test_in_the_same_shape_a_count_or_a_misplaced_resume_is_lightnings_a_rate_alone_not() -> None:
    """The same resume seen as the job counting a step past is Lightning's; a learning rate
    apart beside the misplaced resume is too (an epoch-interval scheduler steps where the
    shifted epoch ends); a learning rate apart with the resume in place is the program's
    (a warm-up counter lost), whatever the shape."""
    assert key(restarted(EPOCH_END_BY_STEPS, [ahead()])) == ITERATION
    both = judge(restarted(EPOCH_END_BY_STEPS, [wrong_rate(), misplaced()]))
    assert both.known is not None and both.known.issue.key == ITERATION
    alone = judge(restarted(EPOCH_END_BY_STEPS, [wrong_rate()]))
    assert alone.failed and alone.known is None and "learning rate" in alone.reason


@pytest.mark.parametrize(
    "outcome",
    [
        pytest.param(
            restarted({**EPOCH_END_BY_STEPS, "max_steps": -1}, [misplaced()]), id="max-epochs"
        ),
        pytest.param(
            restarted(
                {
                    **EPOCH_END_BY_STEPS,
                    "processed": 7,
                    "completed": 6,
                    "epoch_processed": 1,
                    "epoch_completed": 1,
                },
                [misplaced()],
            ),
            id="mid-epoch-checkpoint",
        ),
        pytest.param(
            restarted({**EPOCH_END_BY_STEPS, "resumed": False}, [misplaced()]), id="not-resumed"
        ),
        pytest.param(
            restarted(EPOCH_END_BY_STEPS, [misplaced(), apart(step=5)]), id="replicas-apart-too"
        ),
        pytest.param(
            restarted(
                EPOCH_END_BY_STEPS,
                [misplaced()],
                fired="raise@lightning.training_step rank=0 step=5",
            ),
            id="an-error-fired-in-the-resumed-run",
        ),
        pytest.param(
            restarted(
                EPOCH_END_BY_STEPS, [misplaced()], before="corrupt@dist.all_reduce rank=1 step=2"
            ),
            id="a-desync-fault-before-the-restart",
        ),
        pytest.param(
            restarted(
                {k: v for k, v in EPOCH_END_BY_STEPS.items() if not k.startswith(("max", "epoch"))},
                [misplaced()],
            ),
            id="facts-without-the-fit-shape",
        ),
        pytest.param(restarted(EPOCH_END_BY_STEPS, [misplaced()], "1.9.0"), id="older-release"),
    ],
)
def test_a_restart_difference_outside_the_iteration_resume_shape_stays_the_programs(
    outcome: Outcome,
) -> None:
    """Training by epochs, a mid-epoch checkpoint, no resume, another failing check, a
    harmful fault, facts without the fit's shape or an older release: the program's (beside
    another check, the issue claims its own violation and the other is the program's)."""
    verdict = judge(outcome)
    assert verdict.known is None or verdict.known.issue.key != ITERATION, verdict.accounts


def test_a_warmup_counter_lost_on_an_epoch_end_resume_by_epochs_is_the_programs() -> None:
    """warmup_counter.py:train_buggy's shape (max_epochs, epoch-end checkpoint, a learning
    rate apart) matches no known issue."""
    by_epochs = {**EPOCH_END_BY_STEPS, "max_steps": -1, "epoch_completed": 1}
    assert match_known(restarted(by_epochs, [wrong_rate()])) is None


@pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty")
@pytest.mark.parametrize("by_steps", [True, False])
@pytest.mark.usefixtures("lightning_in_process")
def test_framework_facts_record_an_epoch_end_resume_as_lightning_counts_it(
    tmp_path: Any, by_steps: bool
) -> None:
    """Resumed from an epoch-end checkpoint, the restored epoch is processed and not yet
    completed at on_train_start under max_steps (Lightning's bug), completed under max_epochs."""
    import lightning.pytorch as pl

    from chaoslight._checks._facts import epoch_facts

    seen: list[dict[str, Any]] = []

    class Fit(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.layer(batch[0]).sum()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def on_train_start(self) -> None:
            seen.append(epoch_facts(self.trainer))

    def fit(length: int, resume: str | None) -> None:
        limit = {"max_steps": length} if by_steps else {"max_epochs": length // 2}
        trainer = pl.Trainer(
            default_root_dir=tmp_path,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[pl.callbacks.ModelCheckpoint(dirpath=tmp_path, save_last=True)],
            **limit,
        )
        trainer.fit(
            Fit(), DataLoader(TensorDataset(torch.ones(4, 2)), batch_size=2), ckpt_path=resume
        )

    fit(2, None)  # one epoch of two steps: last.ckpt written in on_train_epoch_end
    fit(4, str(tmp_path / "last.ckpt"))
    epochs = (1, 0) if by_steps else (1, 1)
    assert (seen[1]["epoch_processed"], seen[1]["epoch_completed"]) == epochs
    # Since 2.5.0 the totals follow the current count (up to 2.4, by epochs: 1 and 0).
    totals = (seen[1]["epoch_total_processed"], seen[1]["epoch_total_completed"])
    assert totals == epochs
    assert (seen[1]["max_steps"] != -1) == by_steps and seen[0]["max_steps"] == (
        2 if by_steps else -1
    )


# -- a time-based val_check_interval decided per rank (Lightning 2.6) ------------------------
TIMED = "lightning-time-validation-apart"
_EVAL_FRAME = (
    'File "/venv/lib/python3.11/site-packages/lightning/pytorch/loops/evaluation_loop.py", '
    "line 145 in run\n"
)
_TRAIN_FRAME = (
    'File "/venv/lib/python3.11/site-packages/lightning/pytorch/loops/'
    'training_epoch_loop.py", line 200 in advance\n'
)


def timed_run(version: str, seconds: float | None, ranks: tuple[RankResult, ...]) -> Outcome:
    events = [
        event(OBSERVATION, FACTS, r.rank, 0, json.dumps(facts(version, val_check_seconds=seconds)))
        for r in ranks
    ]
    return Outcome(HUNG, ranks, events, 1.0, Schedule(), "t.py:train", 60.0, ())


@pytest.mark.parametrize(
    "peer",
    [
        RankResult(1, PASSED),
        RankResult(1, HUNG, stacks=f"Thread 0x1 (most recent call first):\n  {_TRAIN_FRAME}"),
    ],
)
def test_ranks_apart_at_a_time_based_validation_are_lightnings(peer: RankResult) -> None:
    validating = RankResult(
        0, HUNG, stacks=f"Thread 0x1 (most recent call first):\n  {_EVAL_FRAME}"
    )
    outcome = timed_run("2.6.6", 0.3, (validating, peer))
    assert key(outcome) == TIMED
    verdict = judge(outcome)  # failed, and the framework's: reported apart, the search goes on
    assert verdict.known is not None
    assert (
        verdict.known.issue.key == TIMED and "number of batches" in verdict.known.issue.workaround
    )


@pytest.mark.parametrize(
    ("version", "seconds", "stacks"),
    [
        ("2.6.6", None, _EVAL_FRAME),  # validation scheduled by batches: the program's
        ("2.5.6", 0.3, _EVAL_FRAME),  # no time-based validation in that release
        ("2.6.6", 0.3, _TRAIN_FRAME),  # both ranks hung in training: not this decision
    ],
)
def test_a_hang_outside_that_shape_stays_the_programs(
    version: str, seconds: float | None, stacks: str
) -> None:
    hung = RankResult(0, HUNG, stacks=f"Thread 0x1 (most recent call first):\n  {stacks}")
    other = RankResult(1, HUNG, stacks=f"Thread 0x1 (most recent call first):\n  {stacks}")
    outcome = timed_run(
        version, seconds, (hung, other) if stacks == _TRAIN_FRAME else (hung, RankResult(1, PASSED))
    )
    assert key(outcome) is None
    assert judge(outcome).failed


SHUFFLED = "lightning-custom-sampler-shuffled"


def replaced_order() -> Violation:
    return Violation(
        "data-order",
        "in epoch 1 rank 0 draws train loader 0's samples in another order than the "
        "program's sampler gives",
        rank=0,
        aspect="replaced-order",
    )


@pytest.mark.parametrize("fired", ["", "flip@lightning.training_step rank=0 step=0"])
def test_a_curriculum_lightnings_wrapper_shuffled_is_lightnings_whatever_else_fired(
    fired: str,
) -> None:
    """Lightning#21131: the replaced order is claimed, with a fault beside it too."""
    outcome = run([facts("2.6.6")] * 2, [replaced_order()], fired=fired)
    found = match_known(outcome)
    assert found is not None and found.issue.key == SHUFFLED
    assert found.claimed.violations == (replaced_order(),)
    assert "use_distributed_sampler=False" in found.issue.workaround


def test_another_data_order_finding_beside_it_stays_the_programs() -> None:
    hole = Violation("data-order", "in epoch 0 sample 3 of train loader 0 was drawn by no rank")
    found = match_known(run([facts("2.6.6")] * 2, [replaced_order(), hole]))
    assert found is not None and hole not in found.claimed.violations


REBUILT = "lightning-batch-sampler-rebuilt"
SHUFFLE_LOST = "lightning-eval-batch-sampler-shuffle-lost"


def order_loss(aspect: str, loader: str = "train loader 0") -> Violation:
    return Violation("data-order", f"Lightning rebuilt {loader} ({aspect})", rank=0, aspect=aspect)


@pytest.mark.parametrize("fired", ["", "flip@lightning.training_step rank=0 step=0"])
def test_a_rebuilt_batch_sampler_is_lightnings_whatever_else_fired(fired: str) -> None:
    """Lightning#21122: the batch size and the sampler a rebuilt loader lost are claimed,
    with a fault beside them too; a coverage hole beside them stays the program's."""
    lost = [order_loss("rebuilt-batches"), order_loss("sampler-dropped")]
    hole = Violation("data-order", "in validation run 0 sample 3 of validation loader 0 …")
    found = match_known(run([facts("2.6.6")] * 2, [*lost, hole], fired=fired))
    assert found is not None and found.issue.key == REBUILT
    assert found.claimed.violations == tuple(lost)
    assert "use_distributed_sampler=False" in found.issue.workaround


@pytest.mark.parametrize(("version", "claimed"), [("2.4.0", True), ("2.5.0", False)])
def test_an_evaluation_shuffle_lost_is_lightnings_only_where_the_release_has_the_bug(
    version: str, claimed: bool
) -> None:
    """Lightning#20326, fixed in 2.5.0: on a fixed release the same symptom is no longer
    explained by the known issue."""
    lost = order_loss("shuffle-lost", "validation loader 0")
    found = match_known(run([facts(version, package="pytorch-lightning")] * 2, [lost]))
    if claimed:
        assert found is not None and found.issue.key == SHUFFLE_LOST
        assert found.claimed.violations == (lost,)
    else:
        assert found is None or lost not in found.claimed.violations


def test_the_rebuilt_loaders_issue_claims_no_other_order_finding() -> None:
    """Each order issue claims its own aspects: a curriculum Lightning's wrapper shuffled
    is #21131's, never #21122's."""
    from chaoslight._verdict._known import claim_known

    shuffled, rebuilt = replaced_order(), order_loss("rebuilt-batches")
    claims = claim_known(run([facts("2.6.6")] * 2, [shuffled, rebuilt]))
    by_key = {claim.issue.key: claim.claimed.violations for claim in claims}
    assert by_key[REBUILT] == (rebuilt,)
    assert by_key[SHUFFLED] == (shuffled,)


COLLATE = (
    "Traceback (most recent call last):\n"
    '  File "/w/t.py", line 9, in train\n    trainer.fit(model, loader)\n'
    '  File "/v/torch/utils/data/_utils/fetch.py", line 55, in fetch\n'
    "    return self.collate_fn(data)\n"
    '  File "/v/torch/utils/data/_utils/collate.py", line 240, in collate_tensor_fn\n'
    "    return torch.stack(batch, 0, out=out)\n"
    "RuntimeError: stack expects each tensor to be equal size\n"
)
IN_STEP = COLLATE.replace("/v/torch/utils/data/_utils/collate.py", "/w/t.py")


def loud(traceback_of_rank_0: str, prepared: dict[int, int | None]) -> Outcome:
    """Rank 0 failed with this traceback, rank 1 released by it; per rank, the batch size of
    the loader Lightning readied from the program's batch sampler of 4 (none: not rebuilt)."""
    error = ExceptionInfo(
        "RuntimeError", "stack expects each tensor to be equal size", traceback_of_rank_0
    )
    made = {
        "asked_batch": 4,
        "asked_sampler": "RandomSampler",
        "asked_kind": "random",
        "asked_batch_sampler": "BatchSampler",
        "asked_batches": 12,
        "made_batch": None,
        "made_sampler": "DistributedSampler",
        "made_kind": "distributed",
        "made_shuffle": True,
        "made_keeps": False,
        "made_batches": 24,
    }
    events = [
        event(
            OBSERVATION,
            "data-order",
            rank,
            None,
            json.dumps({"prepared": "fit", "rebuilt": made | {"made_batch": size}}),
        )
        for rank, size in prepared.items()
    ]
    events += [event(OBSERVATION, FACTS, rank, None, json.dumps(facts("2.6.6"))) for rank in (0, 1)]
    ranks = (
        RankResult(0, FAILED, exception=error),
        RankResult(
            1,
            RELEASED,
            exception=ExceptionInfo(
                "DistBackendError", "Connection closed by peer", distributed=True
            ),
        ),
    )
    return Outcome(FAILED, ranks, events, 1.0, Schedule(), "t.py:train", 60.0, ())


def test_a_loader_rebuilt_with_no_batch_size_failing_in_collation_is_lightnings() -> None:
    """A loader built outside the hooks: Lightning rebuilds it with no batch size, and the
    first batch fails in torch's collation. The failed rank and the peer it released are
    Lightning's (#21122): nothing of the run is the program's."""
    found = match_known(loud(COLLATE, {0: None, 1: None}))
    assert found is not None and found.issue.key == REBUILT
    assert found.claimed.ranks == frozenset({0, 1})
    assert judge(loud(COLLATE, {0: None, 1: None})).findings == ()


@pytest.mark.parametrize(
    ("traceback", "prepared"),
    [
        (IN_STEP, {0: None, 1: None}),  # raised in the program's own code
        (COLLATE, {0: 4, 1: 4}),  # the batch size kept: the collation error is the program's
        (COLLATE, {}),  # no loader rebuilt
        (COLLATE, {1: None}),  # rebuilt on the other rank only
    ],
)
def test_a_collation_error_lightnings_rebuilding_does_not_explain_stays_the_programs(
    traceback: str, prepared: dict[int, int | None]
) -> None:
    found = match_known(loud(traceback, prepared))
    assert found is None or 0 not in found.claimed.ranks
    assert judge(loud(traceback, prepared)).failed


# -- a resume from an epoch-end checkpoint that counts one epoch fewer (PR #20379) ---------

EPOCH_COUNT_ISSUE = "lightning-epoch-end-resume-count"
# What framework-facts recorded at the resumed fit's start on 2.4.0 (2.5.0 and later:
# the totals 1 and 1).
EPOCH_END_RESUME: dict[str, Any] = {
    "resumed": True,
    "processed": 4,
    "completed": 4,
    "epoch_processed": 1,
    "epoch_completed": 1,
    "epoch_total_processed": 1,
    "epoch_total_completed": 0,
}


def one_epoch_short(rank: int = 0) -> Violation:
    """What restart-equivalence said of Lightning 2.4.0 resuming from an epoch-end
    checkpoint (examples/known_issues/resume_repeats_batch.py:train_fixed), where the
    weights and the global step were the uninterrupted run's."""
    return Violation(
        "restart-equivalence",
        "fit loop state 'epoch_progress.total.completed' at the end: 2 after the resume, "
        "3 uninterrupted",
        rank=rank,
        step=12,
        aspect="epoch-count",
    )


def optimizer_lost() -> Violation:
    return Violation(
        "restart-equivalence",
        "optimizer 0 step count at the end: 8 after the resume, 12 uninterrupted",
        rank=0,
        step=12,
        aspect="optimizer",
    )


@pytest.mark.parametrize("version", ["2.0.0", "2.4.0"])
def test_an_epoch_end_resume_one_epoch_short_is_lightnings(version: str) -> None:
    outcome = run([facts(version, **EPOCH_END_RESUME)] * 2, [one_epoch_short()], first_step=4)
    verdict = judge(outcome)
    assert verdict.known is not None and verdict.known.issue.key == EPOCH_COUNT_ISSUE
    assert not verdict.findings, verdict.accounts  # nothing left that is the program's
    assert "20379" in verdict.known.issue.reference


@pytest.mark.parametrize(
    ("shape", "version"),
    [
        pytest.param(EPOCH_END_RESUME, "2.5.0", id="fixed-release"),
        pytest.param(
            {**EPOCH_END_RESUME, "epoch_total_completed": 1}, "2.4.0", id="counted-at-the-resume"
        ),
        pytest.param({}, "2.4.0", id="not-resumed"),
    ],
)
def test_an_epoch_count_apart_in_another_shape_stays_the_programs(
    shape: dict[str, Any], version: str
) -> None:
    outcome = run([facts(version, **shape)] * 2, [one_epoch_short()], first_step=4)
    verdict = judge(outcome)
    assert verdict.failed and verdict.known is None, verdict.accounts


def test_the_epoch_count_issue_claims_no_optimizer_state_beside_it() -> None:
    """On the buggy release in its shape, an optimizer that lost its steps is still the
    program's: the issue claims the epoch count alone."""
    outcome = run(
        [facts("2.4.0", **EPOCH_END_RESUME)] * 2, [one_epoch_short(), optimizer_lost()], 4
    )
    verdict = judge(outcome)
    assert verdict.failed, verdict.accounts
    assert [a.symptom.violation.aspect for a in verdict.findings] == ["optimizer"]
    assert one_epoch_short() in _claimed(verdict)


def test_restart_equivalence_names_an_epoch_count_alone_apart_and_compares_on() -> None:
    """The check's side: a fit loop whose count of completed epochs alone differs is an
    ``epoch-count`` finding, and the optimizers are still compared after it; any other
    count of the loop apart is ``loop-state`` and ends the comparison (its consequences
    would follow)."""
    from chaoslight._checks._restart import _end
    from chaoslight._checks._restart_compare import Comparison, FitSeen

    def fit(epochs: int, optimizer_steps: int, loop_steps: int = 12) -> FitSeen:
        seen = FitSeen()
        seen.start[0] = {"g": 4, "n": 4, "acc": 1, "resumable": True}
        loop = {
            "epoch_progress.total.completed": epochs,
            "epoch_loop.manual_optimization.optim_step_progress.total.completed": loop_steps,
        }
        opt = [{"keys": ["momentum_buffer"], "steps": {"0": optimizer_steps}}]
        seen.end[0] = {"g": 12, "e": 3, "stop": False, "loop": loop, "opt": opt, "cb": {}}
        return seen

    def aspects(resumed: FitSeen, uninterrupted: FitSeen) -> list[str]:
        result = Comparison("restart-equivalence")
        _end(result, uninterrupted, resumed, same=True, index=0)
        return [v.aspect for v in result.violations()]

    assert aspects(fit(2, 12), fit(3, 12)) == ["epoch-count"]
    assert aspects(fit(2, 8), fit(3, 12)) == ["epoch-count", "optimizer"]
    assert aspects(fit(2, 8, loop_steps=8), fit(3, 12)) == ["loop-state"]


def test_restart_equivalence_counts_optimizer_steps_not_zero_grad_calls() -> None:
    """A checkpoint written while a step was in flight (``OnExceptionCheckpoint``'s, which
    Lightning resumes from by itself) has that step's ``zero_grad`` counted and not its
    optimizer step: the resumed fit ends one ``zero_grad`` ahead having trained the same
    (seen on on_exception_checkpoint.py under a freeze and a restart). Its optimizer steps
    are what the check compares."""
    from chaoslight._checks._restart import _totals

    prefix = "epoch_loop.automatic_optimization.optim_progress.optimizer"
    loop = {
        f"{prefix}.zero_grad.total.completed": 9,
        f"{prefix}.step.total.completed": 8,
        "epoch_progress.total.completed": 2,
    }
    assert _totals(loop) == {
        f"{prefix}.step.total.completed": 8,
        "epoch_progress.total.completed": 2,
    }


# -- workers and an epoch-end resume: TrainingEpochLoop keeps setup_data's iterator (#21938) --

WORKERS = "lightning-resume-workers-epoch-zero"
# Resumed at step 4 from an epoch-end last.ckpt (epoch 0 complete): 4 batches an epoch, a
# DataLoader with 2 workers over a DistributedSampler.
EPOCH_START_WITH_WORKERS: dict[str, Any] = {
    "resumed": True,
    "processed": 4,
    "completed": 4,
    "global_step": 4,
    "epoch_processed": 1,
    "epoch_completed": 1,
    "max_steps": -1,
    "train_batches": 4,
    "train_workers": 2,
    "train_set_epoch": True,
}


def other_samples(step: int = 4) -> Violation:
    return Violation(
        "restart-equivalence",
        f"rank 0 trained other samples at step {step} (epoch 1, batch 0) after the resume",
        rank=0,
        step=step,
        aspect="samples",
    )


def other_weights() -> Violation:
    return Violation(
        "restart-equivalence",
        "parameter 'net.weight' ends differently than in an uninterrupted run",
        rank=0,
        step=11,
        aspect="weights",
    )


@pytest.mark.parametrize("version", ["2.5.3", "2.6.6"])
def test_the_first_resumed_epoch_with_workers_on_epoch_zeros_order_is_lightnings(
    version: str,
) -> None:
    """Resumed at an epoch's start with loader workers and an epoch-setting sampler, the
    samples of the first resumed epoch, and the weights they leave, are Lightning's."""
    found = match_known(restarted(EPOCH_START_WITH_WORKERS, [other_samples(), other_weights()]))
    assert found is not None and found.issue.key == WORKERS
    assert set(found.claimed.violations) == {other_samples(), other_weights()}
    assert "21938" in found.issue.reference and "num_workers=0" in found.issue.workaround
    outcome = restarted(EPOCH_START_WITH_WORKERS, [other_samples()], version)
    verdict = judge(outcome)
    assert verdict.known is not None and verdict.known.issue.key == WORKERS, verdict.accounts


@pytest.mark.parametrize(
    ("shape", "violations", "version"),
    [
        pytest.param({}, [other_samples()], "2.5.2", id="before-2.5.3"),
        pytest.param({"train_workers": 0}, [other_samples()], "2.6.6", id="no-workers"),
        pytest.param({"train_set_epoch": False}, [other_samples()], "2.6.6", id="no-set-epoch"),
        pytest.param(
            {"processed": 6, "completed": 6, "global_step": 6},
            [other_samples(6)],
            "2.6.6",
            id="mid-epoch",
        ),
        pytest.param({}, [other_samples(9)], "2.6.6", id="a-later-epoch"),
        pytest.param({}, [other_weights()], "2.6.6", id="weights-alone"),
    ],
)
def test_other_samples_outside_that_shape_stay_the_programs(
    shape: dict[str, Any], violations: list[Violation], version: str
) -> None:
    """Without workers or an epoch-setting sampler, before 2.5.3, mid-epoch, past the first
    resumed epoch, or with no samples apart: the program's (a sampler's epoch forgotten)."""
    outcome = restarted({**EPOCH_START_WITH_WORKERS, **shape}, violations, version)
    verdict = judge(outcome)
    assert verdict.failed and verdict.known is None, verdict.accounts


def test_beside_the_claimed_samples_a_learning_rate_apart_stays_the_programs() -> None:
    """The issue claims the samples and weights; a learning rate apart is the program's."""
    verdict = judge(restarted(EPOCH_START_WITH_WORKERS, [other_samples(), wrong_rate()]))
    assert verdict.failed and verdict.known is None, verdict.accounts
    assert "learning rate" in verdict.reason


# -- a Fabric loader's epoch, set from its own pass count (since PR #16841) ------------------

FABRIC_EPOCH = "fabric-loader-epoch-restarts"
LOOP = "TensorDataset[64]"


def data_pass(rank: int, step: int, epoch: int, sampler_epoch: int, fabric: bool = True) -> Event:
    """data-order's loop observation of a pass over a shuffling DistributedSampler."""
    sampler = {"class": "DistributedSampler", "shuffle": True, "epoch": sampler_epoch}
    facts: dict[str, Any] = {
        "fit": -1,
        "epoch": epoch,
        "loaders": [{"samplers": [sampler], "promises": [], "replaced": None}],
        "loop": LOOP,
        "world_size": 2,
    }
    if fabric:
        facts["fabric"] = ["lightning", "2.6.6"]
    return event(OBSERVATION, "data-order", rank, step, json.dumps(facts))


def fabric_restart(
    violations: list[Violation], resumed_epoch: int = 0, fabric: bool = True, passes: int = 2
) -> Outcome:
    """A Fabric loop that crashed in its third pass (8 steps a pass) and restarted: the
    restarted run's first pass at sampler epoch ``resumed_epoch``."""
    crash = "crash@torch.backward rank=0 step=20"
    first_events = [data_pass(r, 8 * e, e, e, fabric) for r in (0, 1) for e in range(passes)]
    first = Outcome(
        FAILED,
        (RankResult(0, FAILED), RankResult(1, RELEASED)),
        first_events,
        1.0,
        Schedule.parse(crash),
        "t.py:train",
        60.0,
        (),
    )
    events = [data_pass(r, 0, 0, resumed_epoch, fabric) for r in (0, 1)]
    ranks = (RankResult(0, PASSED), RankResult(1, PASSED))
    last = Outcome(FAILED, ranks, events, 1.0, Schedule(), "t.py:train", 60.0, tuple(violations))
    return replace(last, attempts=(first,), schedule=Schedule.parse(f"restarts 1\n{crash}"))


def loop_samples(step: int = 16) -> Violation:
    return Violation(
        "restart-equivalence",
        f"rank 0 trained on other samples at step {step} (the restarted run's step 0) than an "
        "uninterrupted run",
        rank=0,
        step=step,
        aspect="samples",
    )


def test_a_restarted_fabric_pass_at_epoch_zero_past_the_first_pass_is_fabrics() -> None:
    """Resumed in the third pass, Fabric's loader read epoch 0's order: its samples are
    Fabric's known issue, with the release the pass ran under."""
    found = match_known(fabric_restart([loop_samples()]))
    assert found is not None and found.issue.key == FABRIC_EPOCH
    assert (found.package, found.version) == ("lightning", "2.6.6")
    assert "16841" in found.issue.reference and "to_device" in found.issue.workaround


@pytest.mark.parametrize(
    "outcome",
    [
        pytest.param(fabric_restart([loop_samples()], fabric=False), id="not-fabrics-loader"),
        pytest.param(fabric_restart([loop_samples()], resumed_epoch=2), id="epoch-restored"),
        pytest.param(fabric_restart([loop_samples(4)]), id="within-the-first-pass"),
        pytest.param(fabric_restart([loop_samples()], passes=1), id="never-past-one-pass"),
        pytest.param(fabric_restart([wrong_rate()]), id="a-learning-rate"),
    ],
)
def test_other_resumed_samples_or_state_of_a_loop_stay_the_programs(outcome: Outcome) -> None:
    """A plain loader, a sampler at the resumed epoch, a resume inside the first pass, an
    earlier run that never began a second pass, or a learning rate apart: the program's."""
    verdict = judge(outcome)
    assert verdict.failed and verdict.known is None, verdict.accounts
