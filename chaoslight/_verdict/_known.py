"""Known issues of the frameworks chaoslight patches, reported apart from the user's bugs.

As Valgrind ships suppressions for the system libraries, chaoslight ships a table of
failures Lightning itself causes. A finding that matches an entry is reported once per
campaign under "known issues in <package> <version>", with its workaround and upstream
reference, and the search goes on looking for the user's own bugs; ``strict=True``
(``chaoslight fuzz --strict``) makes it a failure like any other. A finding that
matches no entry stays the user's, even when every frame is in Lightning.

Adding an issue is one ``KnownIssue(...)`` in ``KNOWN_ISSUES`` (and its test). What an
issue is and how a run's release is found: ``_known_issue.py``; the signatures, by
concept: ``_known_sigterm.py`` (Lightning's SIGTERM path), ``_known_workers.py`` (a
group SIGTERM), ``_known_silent.py`` (damage a check sees), ``_known_schedule.py`` (a decision the
ranks take apart), ``_known_fork.py`` (the interpreter's own); where a rank was:
``_known_frames.py``.
"""

from __future__ import annotations

import re

from chaoslight._report import HUNG, Outcome
from chaoslight._verdict._known_fork import interpreter_in_stacks, worker_stuck_in_fork
from chaoslight._verdict._known_frames import collective_ends
from chaoslight._verdict._known_issue import (
    NOTHING,
    Claimed,
    KnownClaim,
    KnownFinding,
    KnownIssue,
    package_in_stacks,
    package_of,
    parse_version,
)
from chaoslight._verdict._known_schedule import time_based_validation_apart
from chaoslight._verdict._known_sigterm import (
    broadcast_or_alone,
    exit_zero_on_sigterm,
    stopped_alone_claims,
)
from chaoslight._verdict._known_silent import (
    batch_sampler_rebuilt,
    custom_sampler_shuffled,
    epoch_end_resume_by_steps,
    epoch_end_resume_count,
    evaluation_shuffle_lost,
    fabric_loader_epoch_restarted,
    package_in_fabric_passes,
    package_in_facts,
    repeated_batch_after_resume,
    resume_workers_epoch_zero,
    static_graph_first_step,
)
from chaoslight._verdict._known_workers import workers_killed_before_stop
from chaoslight._verdict._preemption import Delivery, deliveries

__all__ = [
    "KNOWN_ISSUES",
    "KnownClaim",
    "KnownFinding",
    "KnownIssue",
    "claim_known",
    "match_known",
    "parse_version",
]


# A faulthandler frame of Lightning's OnExceptionCheckpoint.on_exception, either flavour.
_ON_EXCEPTION_FRAME = re.compile(
    r"(lightning/pytorch|pytorch_lightning)/callbacks/on_exception_checkpoint\.py\", "
    r"line \d+ in on_exception\b"
)


def _saved_on_exception(outcome: Outcome, taken: list[Delivery]) -> Claimed:
    """A rank hung inside OnExceptionCheckpoint.on_exception (save_checkpoint's barrier):
    its hang, and its peers' ends in a collective, are the issue's."""
    saving = frozenset(
        r.rank
        for r in outcome.ranks
        if r.status == HUNG and _ON_EXCEPTION_FRAME.search(r.stacks or "")
    )
    return Claimed(saving | collective_ends(outcome)) if saving else NOTHING


_WORKAROUND = (
    "stop together by agreement: after Lightning installs its handler (e.g. in "
    "on_train_start) replace it with one that only sets a flag; at every batch start "
    "all-reduce the flag with MAX on every rank and, if set, save a checkpoint, set "
    "trainer.should_stop = True and return -1 from on_train_batch_start; after fit, "
    "exit with status 143 so the scheduler requeues the job "
    "(examples/catalogue/preemption.py:train_fixed)"
)

KNOWN_ISSUES: tuple[KnownIssue, ...] = (
    KnownIssue(
        key="lightning-sigterm-dataloader-workers",
        package="pytorch-lightning",
        versions=("2.0.0", "2.6.99"),
        title=(
            "a SIGTERM to the process group (SLURM's) kills the DataLoader workers, and "
            "torch's loader raises before Lightning's graceful stop"
        ),
        signature=(
            "SIGTERM sent to a rank's process group (preempt group=true) and taken by "
            "Lightning's handler, no hard fault but preemptions fired, and a rank it reached "
            "failed with torch's 'DataLoader worker (pid N) is killed by signal: Terminated' "
            "(or 'exited unexpectedly') instead of SIGTERMException"
        ),
        reference=(
            "torch/utils/data/_utils/signal_handling.py (workers die of a SIGTERM their "
            "parent did not send; the SIGCHLD handler raises); the pattern of "
            "https://github.com/KempnerInstitute/KempnerForge/issues/177 (fixed in its PR #203)"
        ),
        workaround=(
            "make the workers ignore SIGTERM: DataLoader(..., worker_init_fn=lambda _: "
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)); the rank then stops on its "
            "own terms and the loader still shuts its workers down "
            "(examples/bugs/emergency_save_workers.py:train_fixed)"
        ),
        claims=workers_killed_before_stop,
    ),
    KnownIssue(
        key="lightning-sigterm-broadcast",
        package="pytorch-lightning",
        versions=("2.5.2", "2.6.99"),
        title="Lightning's SIGTERM handler calls dist.broadcast inside the signal handler",
        signature=(
            "SIGTERM taken by Lightning's handler and no hard fault but preemptions fired; a "
            "rank waits in, or was released from, the broadcast Lightning's handler issues "
            "(it runs wherever the signal lands and pairs with a peer's other collective), "
            "whatever its peers do; or a rank waits in the broadcast at each batch start "
            "while a peer is in another collective or has ended, or the ranks stopped at "
            "different steps; or a signalled rank raised SIGTERMException from "
            "Lightning's loop alone (the per-batch broadcast carries rank 0's flag only) "
            "while a peer not stopped with it ended otherwise; or a rank died of gloo's "
            "size-mismatch abort (the handler's broadcast paired with a collective of "
            "another size, such as DDP's buffer broadcast)"
        ),
        reference=(
            "https://github.com/Lightning-AI/pytorch-lightning/pull/20825 (the fix for "
            "issue #20806, released in 2.5.2)"
        ),
        workaround=_WORKAROUND,
        claims=broadcast_or_alone,
    ),
    KnownIssue(
        key="lightning-sigterm-alone",
        package="pytorch-lightning",
        versions=("2.0.0", "2.5.1"),
        title="a rank that receives SIGTERM stops alone and leaves its peers in a collective",
        signature=(
            "SIGTERM taken by Lightning's handler and no hard fault but preemptions fired; a "
            "signalled rank raised SIGTERMException from Lightning's loop while a peer that "
            "was not stopped with it (not signalled, or stopped at another step) ended "
            "otherwise (a gloo error on CPU, a hang on NCCL)"
        ),
        reference="https://github.com/Lightning-AI/pytorch-lightning/issues/20806",
        workaround=_WORKAROUND,
        claims=stopped_alone_claims,
    ),
    KnownIssue(
        key="lightning-on-exception-checkpoint",
        package="pytorch-lightning",
        versions=("2.0.0", "2.6.99"),
        title=(
            "OnExceptionCheckpoint saves from the failing rank alone: save_checkpoint's "
            "barrier waits for peers that never come"
        ),
        signature=(
            "a hang in which a rank waits in a collective called from "
            "OnExceptionCheckpoint.on_exception (trainer.save_checkpoint's barrier) while "
            "its peers go on training"
        ),
        reference="https://github.com/Lightning-AI/pytorch-lightning/issues/20187",
        workaround=(
            "under DDP, do not use OnExceptionCheckpoint: save from hooks every rank "
            "reaches (ModelCheckpoint), or in your own on_exception write this rank's own "
            "file with torch.save (no collective) and let the exception go on"
        ),
        claims=_saved_on_exception,
    ),
    KnownIssue(
        key="lightning-sigterm-exit-zero",
        package="pytorch-lightning",
        versions=("2.0.0", "2.6.99"),
        title=(
            "a job stopped by SIGTERM exits 0: SIGTERMException is a SystemExit with no "
            "code, so the scheduler sees success and does not requeue it"
        ),
        signature=(
            "the exit-status check failed the job (every rank exited 0 before its planned "
            "end); in that run Lightning's handler took the SIGTERM and every rank that did "
            "not return raised SIGTERMException from Lightning's loops, with no exit code"
        ),
        reference=(
            "https://github.com/Lightning-AI/pytorch-lightning/issues/19916 (fixed on master "
            "by PR #21623, SIGTERMException exits 143; in no release yet)"
        ),
        workaround=(
            "catch the stop and exit non-zero so that the scheduler requeues the job: "
            "`except SIGTERMException: ...save...; "
            "sys.exit(143)` around trainer.fit, or `if trainer.received_sigterm: "
            "sys.exit(143)` after it (examples/known_issues/sigterm_exit_zero.py:train_fixed)"
        ),
        claims=exit_zero_on_sigterm,
    ),
    KnownIssue(
        key="lightning-time-validation-apart",
        package="pytorch-lightning",
        versions=("2.6.0", "2.6.99"),
        title=(
            "a time-based val_check_interval is decided by each rank's own clock: under DDP "
            "the ranks validate at different batches and their collectives part"
        ),
        signature=(
            "every rank recorded a time-based val_check_interval (the framework-facts "
            "observations), and one rank hung inside Lightning's evaluation loop while a peer "
            "trained on or had ended, or a rank died of gloo's size-mismatch abort"
        ),
        reference=(
            "lightning/pytorch/loops/training_epoch_loop.py, _should_check_val_fx: "
            "time.monotonic() - trainer._last_val_time >= interval, per rank, with no "
            "collective agreeing on it"
        ),
        workaround=(
            "under DDP give val_check_interval as a number of batches (an int) or a "
            "fraction of the epoch (a float): every rank then counts the same batches"
        ),
        claims=time_based_validation_apart,
    ),
    KnownIssue(
        key="lightning-static-graph-manual-sync",
        package="pytorch-lightning",
        versions=("2.0.0", "2.5.6"),
        title=(
            "manual optimization under DDPStrategy(static_graph=True) skips the first "
            "iteration's gradient all-reduce: the replicas part at the first step"
        ),
        signature=(
            "every rank passed with no fault but benign ones; every rank ran manual "
            "optimization (automatic_optimization=False) under DDP with static_graph=True "
            "(the framework-facts observations); the only failing check is replicas-in-sync, "
            "first broken at the first step it observed in the run"
        ),
        reference=(
            "https://github.com/Lightning-AI/pytorch-lightning/pull/21251 (the fix for "
            "issue #18086, released in 2.6.0)"
        ),
        workaround=(
            "upgrade to Lightning 2.6.0 or later, or leave static_graph at False (the "
            "default) with manual optimization "
            "(examples/known_issues/static_graph_manual.py:train_fixed)"
        ),
        claims=static_graph_first_step,
    ),
    KnownIssue(
        key="lightning-resume-repeats-batch",
        package="pytorch-lightning",
        versions=("2.0.0", "2.4.0"),
        title=(
            "resuming from a checkpoint written in on_train_batch_end trains that batch "
            "again: the resumed job ends one optimizer step past the uninterrupted one"
        ),
        signature=(
            "every rank of the resumed run passed with no fault but benign ones and resumed "
            "from a checkpoint whose batch progress has one batch processed and not "
            "completed (written inside on_train_batch_end: ModelCheckpoint("
            "every_n_train_steps=...), a mid-epoch last.ckpt; the framework-facts "
            "observations); the only failing check is restart-equivalence"
        ),
        reference=(
            "https://github.com/Lightning-AI/pytorch-lightning/pull/20379 (restart counters "
            "made consistent with uninterrupted training, released in 2.5.0)"
        ),
        workaround=(
            "upgrade to Lightning 2.5.0 or later, or checkpoint at epoch ends only "
            "(ModelCheckpoint without every_n_train_steps): an epoch-end checkpoint resumes "
            "exactly (examples/known_issues/resume_repeats_batch.py:train_fixed)"
        ),
        claims=repeated_batch_after_resume,
    ),
    KnownIssue(
        key="lightning-epoch-end-resume-count",
        package="pytorch-lightning",
        versions=("2.0.0", "2.4.99"),
        title=(
            "a fit resumed from an epoch-end checkpoint never counts that epoch completed: "
            "fit_loop.epoch_progress ends one epoch short, the training is the same"
        ),
        signature=(
            "every rank of the resumed run passed and resumed from a checkpoint whose epoch "
            "progress has one epoch processed and not completed (written in "
            "on_train_epoch_end, as ModelCheckpoint's default; the framework-facts "
            "observations); restart-equivalence's only finding about the fit loop is its "
            "count of completed epochs, with the step, the epoch and the optimizer steps equal"
        ),
        reference=(
            "https://github.com/Lightning-AI/pytorch-lightning/pull/20379 (restart counters "
            "made consistent with uninterrupted training, released in 2.5.0)"
        ),
        workaround=(
            "upgrade to Lightning 2.5.0 or later; until then read trainer.current_epoch and "
            "trainer.global_step, not fit_loop.epoch_progress's totals, after a resume "
            "(examples/known_issues/resume_repeats_batch.py:train_fixed on 2.4.x)"
        ),
        claims=epoch_end_resume_count,
    ),
    KnownIssue(
        key="lightning-iteration-resume-epoch-end",
        package="pytorch-lightning",
        versions=("2.0.0", "2.6.99"),
        title=(
            "with max_steps set, a resume from an epoch-end checkpoint is taken for "
            "mid-epoch: the next epoch's first batch is trained as one more batch of the "
            "old epoch"
        ),
        signature=(
            "every rank of the resumed run passed with no fault but benign ones, after a "
            "crash or preemption that ended the earlier run; every rank trained by max_steps "
            "and resumed from a checkpoint written at an epoch end (its epoch progress at "
            "the fit's start has one epoch processed and not completed: ModelCheckpoint's "
            "default, in on_train_epoch_end; the framework-facts observations); the only "
            "failing check is restart-equivalence"
        ),
        reference=(
            "FitLoop.on_run_start counts the restored epoch as completed only `if not "
            "self._iteration_based_training()` (added by "
            "https://github.com/Lightning-AI/pytorch-lightning/pull/12821, 1.7.0; unfixed); "
            "related: https://github.com/Lightning-AI/pytorch-lightning/issues/19617"
        ),
        workaround=(
            "checkpoint by steps where an epoch ends: ModelCheckpoint(every_n_train_steps=N) "
            "with N a multiple of the optimizer steps per epoch (exact on Lightning 2.5.0 "
            "or later), or train by max_epochs instead of max_steps "
            "(examples/known_issues/iteration_resume.py:train_fixed)"
        ),
        claims=epoch_end_resume_by_steps,
    ),
    KnownIssue(
        key="lightning-resume-workers-epoch-zero",
        package="pytorch-lightning",
        versions=("2.5.3", "2.6.99"),
        title=(
            "a fit resumed from an epoch-end checkpoint with DataLoader workers trains its "
            "first epoch on epoch 0's order: the iterator is made, and draws its first "
            "indices, before the sampler's epoch is set"
        ),
        signature=(
            "every rank of the resumed run passed, after faults that ended a run or cannot "
            "change training, and resumed at an epoch's start (the framework-facts "
            "observations: batch and epoch progress complete) with a training loader that "
            "has worker processes and a sampler with set_epoch; it claims "
            "restart-equivalence's violations of the samples trained in that first resumed "
            "epoch and, with one of those, of the weights the job ends with"
        ),
        reference=(
            "https://github.com/Lightning-AI/pytorch-lightning/issues/21938 (open; "
            "TrainingEpochLoop.on_run_start keeps the iterator FitLoop.setup_data made while "
            "resuming, since PR #20775 in 2.5.3; fix proposed in PR #21941)"
        ),
        workaround=(
            "set the sampler's epoch before the fit makes the iterator: "
            "Trainer(use_distributed_sampler=False) with a DistributedSampler of your own "
            "whose set_epoch(<the checkpoint's epoch>) is called when the loader is built, or "
            "num_workers=0 (a single-process iterator draws its indices at the first batch) "
            "(examples/known_issues/resume_workers_epoch_zero.py:train_fixed)"
        ),
        claims=resume_workers_epoch_zero,
    ),
    KnownIssue(
        key="fabric-loader-epoch-restarts",
        package="lightning-fabric",
        versions=("2.0.0", "2.6.99"),
        title=(
            "a loader from fabric.setup_dataloaders sets its sampler's epoch to the number of "
            "passes begun over it, over the program's set_epoch: a restarted job reads "
            "epoch 0's order again in the epoch it resumed at"
        ),
        signature=(
            "every rank of the restarted run passed, after faults that ended a run or cannot "
            "change training; its first pass over a Fabric loader (data-order's loop "
            "observations) drew from a shuffling DistributedSampler at epoch 0 where the "
            "earlier run had begun a second pass; it claims restart-equivalence's violations "
            "of the samples trained from that second pass's step on, only"
        ),
        reference=(
            "lightning.fabric.wrappers._FabricDataLoader.__iter__ calls "
            "_set_sampler_epoch(self._dataloader, self._num_iter_calls) at every pass "
            "(https://github.com/Lightning-AI/pytorch-lightning/pull/16841, 2.0.0), a count "
            "no checkpoint holds"
        ),
        workaround=(
            "give the resumed loop a loader Fabric does not wrap: a DataLoader over "
            "DistributedSampler(data, num_replicas=fabric.world_size, rank=fabric.global_rank) "
            "whose set_epoch(epoch) the loop calls, batches moved with fabric.to_device "
            "(examples/known_issues/fabric_loader_epoch.py:train_fixed)"
        ),
        claims=fabric_loader_epoch_restarted,
    ),
    KnownIssue(
        key="lightning-custom-sampler-shuffled",
        package="pytorch-lightning",
        versions=("2.0.0", "2.6.99"),
        title=(
            "under DDP a training loader's own sampler is wrapped in "
            "DistributedSamplerWrapper(shuffle=True): each rank trains on a shuffle of the "
            "order the sampler gives (a curriculum, a fixed order) instead of its share of it"
        ),
        signature=(
            "data-order saw a training loader whose sampler is the program's own (not "
            "torch's RandomSampler or SequentialSampler) inside Lightning's "
            "DistributedSamplerWrapper with shuffle=True, the program's sampler giving the "
            "same order in two epochs and the rank drawing another; it claims those "
            "data-order violations only, whatever else fired"
        ),
        reference=(
            "https://github.com/Lightning-AI/pytorch-lightning/issues/21131 and "
            "https://github.com/Lightning-AI/pytorch-lightning/issues/21447 (open; "
            "_get_distributed_sampler passes shuffle=True for every training loader)"
        ),
        workaround=(
            "Trainer(use_distributed_sampler=False) with a rank-aware sampler of your own, "
            "e.g. lightning.fabric.utilities.distributed.DistributedSamplerWrapper("
            "your_sampler, shuffle=False) built in the DataModule's train_dataloader "
            "(examples/known_issues/custom_sampler_order.py:train_fixed)"
        ),
        claims=custom_sampler_shuffled,
    ),
    KnownIssue(
        key="lightning-batch-sampler-rebuilt",
        package="pytorch-lightning",
        versions=("2.0.0", "2.6.99"),
        title=(
            "under DDP a loader given a batch sampler is rebuilt around a DistributedSampler "
            "over the whole data set: a torch BatchSampler comes back with batches of one, "
            "and a sampler the batch sampler held (weighted, curriculum) is dropped"
        ),
        signature=(
            "data-order saw a loader the program gave with batch_sampler= (a train, "
            "validation, test or predict loader a stage drew from) that Lightning's data "
            "connector rebuilt with another batch size, or around a DistributedSampler that "
            "never draws from the program's sampler; it claims those data-order violations, "
            "and a rank Lightning readied such a loader on whose error was raised in torch's "
            "collation (a loader built outside the *_dataloader hooks is rebuilt with no "
            "batch size at all and fails at its first batch) with the peers it released, "
            "only, whatever else fired"
        ),
        reference=(
            "https://github.com/Lightning-AI/pytorch-lightning/issues/21122 (open; "
            "_get_distributed_sampler reads loader.sampler, torch's SequentialSampler when a "
            "batch sampler is given, and _dataloader_init_kwargs_resolve_sampler rebuilds a "
            "plain BatchSampler's loader from the sampler alone, batch_size left at 1)"
        ),
        workaround=(
            "give the loader batch_size= and sampler=/shuffle= instead of a torch "
            "BatchSampler, or set Trainer(use_distributed_sampler=False) and build the batch "
            "sampler over a rank-aware sampler: DistributedSampler(data), or "
            "lightning.fabric.utilities.distributed.DistributedSamplerWrapper(your_sampler) "
            "(examples/known_issues/batch_sampler_rebuilt.py:train_fixed)"
        ),
        claims=batch_sampler_rebuilt,
    ),
    KnownIssue(
        key="lightning-eval-batch-sampler-shuffle-lost",
        package="pytorch-lightning",
        versions=("2.0.0", "2.4.99"),
        title=(
            "under DDP a validation, test or predict loader given a batch sampler over a "
            "RandomSampler is rebuilt with DistributedSampler(shuffle=False): every run "
            "draws the same samples in the same order"
        ),
        signature=(
            "data-order saw an evaluation loader whose batch sampler held a RandomSampler "
            "rebuilt by Lightning around a DistributedSampler with shuffle=False; it claims "
            "those data-order violations only, whatever else fired"
        ),
        reference=(
            "https://github.com/Lightning-AI/pytorch-lightning/issues/20326 (fixed in 2.5.0: "
            "_is_dataloader_shuffled reads the batch sampler's sampler)"
        ),
        workaround=(
            "upgrade to pytorch-lightning 2.5.0 or later, or set "
            "Trainer(use_distributed_sampler=False) and build the batch sampler over "
            "DistributedSampler(data, shuffle=True) "
            "(examples/known_issues/batch_sampler_rebuilt.py:train_fixed)"
        ),
        claims=evaluation_shuffle_lost,
    ),
    KnownIssue(
        key="cpython-fork-head-lock",
        package="cpython",
        versions=("3.8.0", "3.11.9"),
        fixed_in=("3.8.20", "3.9.20", "3.10.15"),
        title=(
            "a process forked while another thread takes the interpreter's thread-list lock "
            "waits for that lock for good: a DataLoader worker started by fork never runs"
        ),
        signature=(
            "a rank hung waiting on its DataLoader, and one of the workers of that loader "
            "answered with a stack whose innermost frame is the os.fork() of "
            "multiprocessing's fork start (it never returned into its own code); it claims "
            "that rank's hang and its peers' ends in a collective, whatever else fired"
        ),
        reference=(
            "https://github.com/python/cpython/issues/112275 (PyOS_AfterFork_Child takes "
            "HEAD_LOCK before re-initialising it; fixed in 3.12.0, 3.11.10, 3.10.15, 3.9.20 "
            "and 3.8.20)"
        ),
        workaround=(
            "upgrade Python to 3.12 (or 3.11.10 or later); or start the workers without "
            "fork, DataLoader(..., multiprocessing_context='forkserver'), or fork them once "
            "per fit, persistent_workers=True"
        ),
        claims=worker_stuck_in_fork,
    ),
)


def claim_known(
    outcome: Outcome, issues: tuple[KnownIssue, ...] = KNOWN_ISSUES
) -> list[KnownClaim]:
    """Every known issue of the release the run ran that claims symptoms of ``outcome``
    (``KnownIssue.claims``), in the table's order."""
    taken = [d for d in deliveries(outcome) if d.by_lightning]
    # A restarted job's SIGTERM may have come in an earlier run (exit-status names that
    # run): the package is the one whose handler took it there. ``taken`` stays this
    # run's own, so a signature that needs a SIGTERM in this run still needs one.
    earlier = [d for run in outcome.attempts for d in deliveries(run)]
    first = taken or [d for d in earlier if d.by_lightning]
    # A silent bug leaves no signal and no stack: the ranks' own facts name the release.
    found = (
        package_of(first[0])
        if first
        else package_in_stacks(outcome)
        or package_in_facts(outcome)
        or package_in_fabric_passes(outcome)  # a Fabric loop: no Trainer recorded facts
    )
    interpreter = interpreter_in_stacks(outcome)  # the interpreter's own issues
    claims = []
    for issue in issues:
        release = interpreter if issue.package == "cpython" else found
        if release is None:
            continue
        package, version = release
        if issue.covers(package, version):
            claimed = issue.claims(outcome, taken)
            if claimed:
                claims.append(KnownClaim(issue, package, version, claimed))
    return claims


def match_known(
    outcome: Outcome, issues: tuple[KnownIssue, ...] = KNOWN_ISSUES
) -> KnownClaim | None:
    """The first known issue that claims symptoms of ``outcome`` (``claim_known``), or None."""
    claims = claim_known(outcome, issues)
    return claims[0] if claims else None
