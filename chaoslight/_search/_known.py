"""Known issues of the frameworks chaoslight patches, reported apart from the user's bugs.

As Valgrind ships suppressions for the system libraries, chaoslight ships a table of
failures Lightning itself causes. A finding that matches an entry is reported once per
campaign under "known issues in <package> <version>", with its workaround and upstream
reference, and the search goes on looking for the user's own bugs; ``strict=True``
(``chaoslight fuzz --strict``) makes it a failure like any other. A finding that
matches no entry stays the user's, even when every frame is in Lightning.

Adding an issue is one ``KnownIssue(...)`` in ``KNOWN_ISSUES`` (and its test).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from chaoslight._checks._exits import ExitStatus, run_label
from chaoslight._report import CRASHED, FAILED, HUNG, PASSED, RELEASED, known_issue_block
from chaoslight._search._hangs import SIZE_MISMATCH
from chaoslight._search._known_silent import (
    epoch_end_resume_by_steps,
    package_in_facts,
    repeated_batch_after_resume,
    static_graph_first_step,
)
from chaoslight._search._known_workers import (
    more_than_a_preemption,
    workers_killed_before_stop,
)
from chaoslight._search._preemption import Delivery, deliveries, stopping_steps

Version = tuple[int, ...]


def parse_version(text: str) -> Version:
    """'2.5.1' -> (2, 5, 1); a suffix such as 'rc1' or '.post0' is ignored."""
    numbers = []
    for part in text.split(".")[:3]:
        leading = re.match(r"\d+", part)
        if leading is None:
            break
        numbers.append(int(leading.group()))
    return tuple(numbers)


@dataclass(frozen=True)
class KnownIssue:
    """One framework bug: where it lives, how to recognise it, what to do about it.

    ``versions`` is ``(first, last)``, inclusive, compared on (major, minor, patch);
    ``matches(outcome, deliveries)`` is the signature, given a run the oracle failed
    and the SIGTERMs it delivered that the package's own handler took (none, for an
    issue that needs no signal). A signature reads the evidence the run left (the hung
    ranks' stacks, the ranks' errors, the faults that fired, where each rank stopped)
    and matches only the documented shape: anything wider hides the program's bugs.
    """

    key: str
    package: str  # the distribution whose handler ran: "pytorch-lightning" or "lightning"
    versions: tuple[str, str]
    title: str
    signature: str  # the signature in words, as the report prints it
    reference: str
    workaround: str
    matches: Callable[[Any, list[Delivery]], bool]

    def covers(self, package: str, version: str) -> bool:
        first, last = (parse_version(v) for v in self.versions)
        return package in _ALIASES.get(self.package, (self.package,)) and (
            first <= parse_version(version) <= last
        )


# The two distributions ship the same trainer code under two names.
_ALIASES = {"pytorch-lightning": ("pytorch-lightning", "lightning")}


@dataclass(frozen=True)
class KnownFinding:
    """A known issue met by a campaign: the issue, the package met, and the run."""

    issue: KnownIssue
    package: str
    version: str
    schedule: Any
    verdict: Any

    def report(self) -> list[str]:
        """The known-issue block (``_report/_known.py``)."""
        issue = self.issue
        return known_issue_block(
            f"{self.package} {self.version}: {issue.title}",
            self.schedule.to_text(),
            self.verdict.reason,
            (issue.signature, issue.workaround, issue.reference),
        )


# Lightning's SIGTERM broadcasts (2.5.2-2.6.x), by the file and function that issue them:
# the one inside its signal handler, and the one at the start of every training batch.
_SIGTERM_BROADCASTS = (
    ("trainer/connectors/signal_connector.py", "_sigterm_notifier_fn"),
    ("loops/training_epoch_loop.py", "_broadcast_sigterm_tensor"),
)
_FLAVOURS = ("lightning/pytorch/", "pytorch_lightning/")
_LOOPS = tuple(f"{flavour}loops/" for flavour in _FLAVOURS)
_PACKAGE = str(Path(__file__).resolve().parents[1]) + os.sep
# Frames between a collective's caller and the wait: torch.distributed, chaoslight's sites.
_PLUMBING = (f"{os.sep}torch{os.sep}distributed{os.sep}", f"{os.sep}wrapt{os.sep}", _PACKAGE)
_STACK_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+ in (\S+)', re.M)  # faulthandler
_TRACEBACK_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+, in (\S+)', re.M)

FrameName = tuple[str, str]  # (file name, function)


def _threads(stacks: str, current: bool = False) -> list[list[FrameName]]:
    """A faulthandler dump's threads, innermost frame first; the thread that dumped only
    when ``current`` (a fatal signal's dump: that thread is the one that died)."""
    blocks = re.split(r"^(?=Thread 0x|Current thread 0x)", stacks, flags=re.M)
    return [
        _STACK_FRAME.findall(b)
        for b in blocks
        if b.startswith("Thread 0x") or (current and b.startswith("Current thread"))
    ]


def _crash_dump(result: Any) -> str:
    """The faulthandler dump a rank that died by a fatal signal (gloo's abort on a
    collective size mismatch, say) left at the end of its output."""
    if result.status != CRASHED:
        return ""
    _, found, dump = (result.output or "").rpartition("Fatal Python error")
    return dump if found else ""


def _traceback_frames(text: str) -> list[FrameName]:
    """The frames of the exception a traceback ends with, innermost first."""
    last = text.rsplit("Traceback (most recent call last):", 1)[-1]
    return _TRACEBACK_FRAME.findall(last)[::-1]


def _collective_caller(frames: list[FrameName]) -> FrameName | None:
    """The frame that issued the collective these frames wait in (None: not in one)."""
    if not frames or f"{os.sep}torch{os.sep}distributed{os.sep}" not in frames[0][0]:
        return None
    return next((f for f in frames if not any(p in f[0] for p in _PLUMBING)), None)


def _blocked_in(result: Any) -> FrameName | None:
    """Who issued the collective a rank was blocked in: from its stacks when it hung or died
    by a fatal signal, else from the torch.distributed error that released it."""
    for frames in [*_threads(result.stacks or ""), *_threads(_crash_dump(result), True)]:
        caller = _collective_caller(frames)
        if caller is not None:
            return caller
    exc = result.exception
    if exc is not None and exc.distributed:
        return _collective_caller(_traceback_frames(exc.traceback))
    return None


def _is_sigterm_broadcast(caller: FrameName) -> bool:
    filename, function = caller
    return any(
        function == name and filename.endswith(flavour + path)
        for path, name in _SIGTERM_BROADCASTS
        for flavour in _FLAVOURS
    )


def _stopped_apart(outcome: Any) -> bool:
    return len(set(stopping_steps(outcome).values())) > 1


def _broadcast_in_handler(outcome: Any, taken: list[Delivery]) -> bool:
    """Lightning's handler took the SIGTERM, nothing but preemptions struck, and a rank
    was blocked in Lightning's SIGTERM broadcast (the handler's or the per-batch one)
    while a peer was in a different collective or had ended, or the ranks stopped at
    different steps."""
    if not taken or more_than_a_preemption(outcome):
        return False
    where = {r.rank: _blocked_in(r) for r in outcome.ranks}
    for rank, caller in where.items():
        if caller is None or not _is_sigterm_broadcast(caller):
            continue
        if _stopped_apart(outcome) or any(w != caller for r, w in where.items() if r != rank):
            return True
    return False


def _stopped_alone(outcome: Any, taken: list[Delivery]) -> bool:
    """Nothing but preemptions struck; a signalled rank raised Lightning's own
    SIGTERMException (from its loops) while a peer, not stopped with it (not signalled, or
    stopped at another step), was released by a transport error or hung."""
    if not taken or more_than_a_preemption(outcome):
        return False
    signalled = {d.rank for d in taken}
    alone = {
        r.rank
        for r in outcome.ranks
        if r.rank in signalled
        and r.status == FAILED
        and r.exception is not None
        and r.exception.type == "SIGTERMException"
        and _raised_in_loops(r.exception.traceback)
    }
    left = [r for r in outcome.ranks if r.rank not in alone and r.status in (RELEASED, HUNG)]
    return bool(alone) and any(r.rank not in signalled or _stopped_apart(outcome) for r in left)


def _mismatch_after_handler(outcome: Any, taken: list[Delivery]) -> bool:
    """Lightning's handler took the SIGTERM, nothing but preemptions struck, and a rank
    died of gloo's size-mismatch abort: the handler's ``dist.broadcast`` runs wherever the
    signal lands and pairs with whatever collective a peer is in (DDP's buffer broadcast
    at forward start, a ``sync_dist`` reduce), and the first collective that pairs two
    different sizes is that one. No stack shows the handler's frame then: the peer dies
    in its own collective, and the signalled rank is released from its next one."""
    if not taken or more_than_a_preemption(outcome):
        return False
    return any(
        r.status == CRASHED and any(words in (r.output or "") for words in SIZE_MISMATCH)
        for r in outcome.ranks
    )


def _broadcast_or_alone(outcome: Any, taken: list[Delivery]) -> bool:
    """2.5.2-2.6.x: the handler's or the per-batch broadcast left a peer behind
    (``_broadcast_in_handler``), or a signalled rank stopped alone (``_stopped_alone``):
    the per-batch broadcast carries rank 0's flag only, so a SIGTERM that reached another
    rank alone is seen by that rank's own check at its batch's end, which raises while its
    peers go on into the next batch's broadcast."""
    return (
        _broadcast_in_handler(outcome, taken)
        or _stopped_alone(outcome, taken)
        or _mismatch_after_handler(outcome, taken)
    )


def _raised_in_loops(traceback: str) -> bool:
    frames = _traceback_frames(traceback)
    return bool(frames) and any(loop in frames[0][0] for loop in _LOOPS)


# A faulthandler frame of Lightning's OnExceptionCheckpoint.on_exception, either flavour.
_ON_EXCEPTION_FRAME = re.compile(
    r"(lightning/pytorch|pytorch_lightning)/callbacks/on_exception_checkpoint\.py\", "
    r"line \d+ in on_exception\b"
)


def _saved_on_exception(outcome: Any, taken: list[Delivery]) -> bool:
    """A rank hung inside OnExceptionCheckpoint.on_exception (save_checkpoint's barrier)."""
    return any(
        r.status == HUNG and _ON_EXCEPTION_FRAME.search(r.stacks or "") for r in outcome.ranks
    )


def _exit_zero_on_sigterm(outcome: Any, taken: list[Delivery]) -> bool:
    """Lightning#19916: the exit-status check failed the job, and in the run it names (the
    last, or "run N of M" of a restarted job) Lightning's handler took a SIGTERM and every
    rank that did not return raised Lightning's SIGTERMException from its loops, a
    SystemExit with no code: exit status 0. A program's own exit 0 is not Lightning's."""
    runs = (*getattr(outcome, "attempts", ()), outcome)
    for violation in outcome.violations:
        if violation.check != ExitStatus.name or not violation.any_end or violation.warning:
            continue
        named = [
            run
            for number, run in enumerate(runs, 1)
            if violation.message.startswith(run_label(number, len(runs)))
        ]
        run = named[0] if named else outcome
        if _stopped_by_lightning_with_zero(run):
            return True
    return False


def _stopped_by_lightning_with_zero(run: Any) -> bool:
    if not any(d.by_lightning for d in deliveries(run)):
        return False
    stopped = [r for r in run.ranks if r.status != PASSED]
    return bool(stopped) and all(
        r.status == FAILED
        and r.exception is not None
        and r.exception.type == "SIGTERMException"
        and r.exception.exit_status == 0
        and _raised_in_loops(r.exception.traceback)
        for r in stopped
    )


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
        matches=workers_killed_before_stop,
    ),
    KnownIssue(
        key="lightning-sigterm-broadcast",
        package="pytorch-lightning",
        versions=("2.5.2", "2.6.99"),
        title="Lightning's SIGTERM handler calls dist.broadcast inside the signal handler",
        signature=(
            "SIGTERM taken by Lightning's handler and no hard fault but preemptions fired; a "
            "rank waits in Lightning's SIGTERM broadcast (the handler's, or the one at each "
            "batch start) while a peer is in another collective or has ended, or the ranks "
            "stopped at different steps; or a signalled rank raised SIGTERMException from "
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
        matches=_broadcast_or_alone,
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
        matches=_stopped_alone,
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
        matches=_saved_on_exception,
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
        matches=_exit_zero_on_sigterm,
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
        matches=static_graph_first_step,
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
        matches=repeated_batch_after_resume,
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
        matches=epoch_end_resume_by_steps,
    ),
)


def match_known(outcome: Any, issues: tuple[KnownIssue, ...] = KNOWN_ISSUES) -> Any:
    """The known issue a failed run shows, as ``(issue, package, version)``, or None."""
    taken = [d for d in deliveries(outcome) if d.by_lightning]
    # A restarted job's SIGTERM may have come in an earlier run (exit-status names that
    # run): the package is the one whose handler took it there. ``taken`` stays this
    # run's own, so a signature that needs a SIGTERM in this run still needs one.
    earlier = [d for run in getattr(outcome, "attempts", ()) for d in deliveries(run)]
    first = taken or [d for d in earlier if d.by_lightning]
    # A silent bug leaves no signal and no stack: the ranks' own facts name the release.
    found = (
        _package_of(first[0]) if first else _package_in_stacks(outcome) or package_in_facts(outcome)
    )
    if found is None:
        return None
    package, version = found
    for issue in issues:
        if issue.covers(package, version) and issue.matches(outcome, taken):
            return issue, package, version
    return None


def _package_of(delivery: Delivery) -> tuple[str, str]:
    """'lightning (pytorch-lightning 2.6.6)' -> ('pytorch-lightning', '2.6.6')."""
    inside = delivery.handler.partition("(")[2].rstrip(")")
    package, _, version = inside.partition(" ")
    return package, version


# A faulthandler frame in Lightning's trainer, either flavour: the folder it is installed in.
_LIGHTNING_FRAME = re.compile(
    r'File "(?P<site>[^"]+)/(?P<flavour>lightning/pytorch|pytorch_lightning)/'
)


def _package_in_stacks(outcome: Any) -> tuple[str, str] | None:
    """The Lightning distribution whose code the hung ranks' stacks run, and its version,
    read from that installation (the ranks' environment, which need not be this one)."""
    for result in outcome.ranks:
        frame = _LIGHTNING_FRAME.search(result.stacks or "")
        if frame is not None:
            package = (
                "lightning" if frame["flavour"] == "lightning/pytorch" else "pytorch-lightning"
            )
            version = _installed_version(frame["site"], package)
            return (package, version) if version is not None else None
    return None


@lru_cache(maxsize=8)
def _installed_version(site: str, package: str) -> str | None:
    for distribution in metadata.distributions(path=[site]):
        if distribution.metadata["Name"].lower() == package:
            return distribution.version
    return None
