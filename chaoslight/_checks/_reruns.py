"""Checks that compare whole runs: the same target and schedule must give the same result."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from chaoslight._checks._base import Check, Evidence, Violation, observe, observer_class
from chaoslight._checks._invariants import checksums
from chaoslight._checks._reference import ProgramKey, program_key
from chaoslight._report import Outcome
from chaoslight._runtime._events import budget_of, parse_fired
from chaoslight._runtime._protocol import Rerun
from chaoslight._schedule import Crash, Schedule, Severity
from chaoslight._schedule._validate import check_bounded_int, check_count, check_tolerance

MAX_RUNS = 100


class Deterministic(Check):
    """``runs`` runs of the same target and schedule end with the same weights and metrics.

    In a World the example is run ``runs`` times. In-process, keep one ``Deterministic``
    object and inject it around each run: every later run of the same program is compared
    with its first (another program's first run starts over). On mismatch the first step
    where the runs part is named.
    """

    name = "deterministic"
    cause = (
        "unseeded randomness (seed_everything missing or per-rank), nondeterministic "
        "kernels, a reduction order that depends on timing, state carried between runs"
    )

    def __init__(self, runs: int = 2, atol: float = 0.0) -> None:
        self.runs = check_bounded_int("runs", runs, 2, MAX_RUNS, "each run is a whole training")
        self.atol = check_tolerance("atol", atol)
        # In-process, the first run of the program judged last, and the program's key.
        self._first: tuple[ProgramKey, Evidence] | None = None

    def observer(self) -> Any:
        check = self

        def on_train_batch_end(self: Any, trainer: Any, module: Any, *args: Any) -> None:
            names, sums = checksums(module)
            observe(check.name, trainer, {"names": names, "sums": sums})

        def on_train_end(self: Any, trainer: Any, module: Any) -> None:
            metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
            observe(check.name, trainer, {"final": True, "metrics": metrics})

        hooks = {"on_train_batch_end": on_train_batch_end, "on_train_end": on_train_end}
        return observer_class("DeterministicObserver", hooks)()

    def judge(self, evidence: Evidence) -> list[Violation]:
        """In-process: compare with the first run of this program."""
        key = program_key(self, evidence)
        if self._first is None or self._first[0] != key:
            self._first = (key, evidence)
            return []
        return self.compare(self._first[1], evidence)

    def judge_reruns(self, evidence: Evidence, rerun: Rerun, scratch: Path) -> list[Violation]:
        """In a World: run the example ``runs - 1`` more times and compare each with the first."""
        for _ in range(self.runs - 1):
            violations = self.compare(evidence, rerun())
            if violations:
                return violations
        return []

    def compare(self, first: Evidence, second: Evidence) -> list[Violation]:
        a, b = self._steps(first), self._steps(second)
        for key in sorted(set(a) | set(b), key=lambda k: (k[0], -1 if k[1] is None else k[1])):
            rank, step = key
            if key not in a or key not in b:
                return [
                    Violation(
                        self.name,
                        "the runs took different numbers of steps",
                        rank=rank,
                        step=step,
                        cause=self.cause,
                    )
                ]
            for name, x, y in zip(a[key]["names"], a[key]["sums"], b[key]["sums"], strict=False):
                diff = max(abs(p - q) for p, q in zip(x, y, strict=True))
                if (self.atol == 0.0 and x != y) or diff > self.atol:
                    return [
                        Violation(
                            self.name,
                            f"the runs part at parameter {name!r} (checksum difference {diff:.3g})",
                            rank=rank,
                            step=step,
                            cause=self.cause,
                        )
                    ]
        return self._metrics(first, second)

    def _steps(self, evidence: Evidence) -> dict[tuple[int, int | None], dict[str, Any]]:
        return {(e.rank, e.step): f for e, f in evidence.observations(self.name) if "sums" in f}

    def _metrics(self, first: Evidence, second: Evidence) -> list[Violation]:
        final_a = {e.rank: f["metrics"] for e, f in first.observations(self.name) if "final" in f}
        final_b = {e.rank: f["metrics"] for e, f in second.observations(self.name) if "final" in f}
        for rank in sorted(final_a):
            for key, value in final_a[rank].items():
                other = final_b.get(rank, {}).get(key)
                if (
                    other is None
                    or abs(other - value) > self.atol
                    or (self.atol == 0 and other != value)
                ):
                    return [
                        Violation(
                            self.name,
                            f"logged metric {key!r} is {value!r} in the first "
                            f"run and {other!r} in another",
                            rank=rank,
                            cause=self.cause,
                        )
                    ]
        return []


class ResumeEquivalence(Check):
    """A run crashed at ``crash_at_step`` and restarted from its checkpoint ends like an
    uninterrupted one (same final weights).

    In a World only. The example runs to the end; then again in a kept working directory
    with every rank killed at ``crash_at_step``; then once more in that directory with no
    faults, as a preempted job is restarted: a ``fit`` that passes no ``ckpt_path`` of its
    own resumes from Lightning's last checkpoint there. The default crash step is the
    first batch of the second epoch: Lightning 2.6 cannot resume a plain ``DataLoader``
    mid-epoch, so a mid-epoch crash differs even for a correct program, and then that is
    named as the likely cause.
    """

    name = "resume-equivalence"
    cause = (
        "callback or module state that is not in the checkpoint, a non-atomic checkpoint "
        "write, a dataloader position not restored"
    )

    def __init__(self, crash_at_step: int | None = None, atol: float = 0.0) -> None:
        self.crash_at_step = check_count("crash_at_step", crash_at_step, 1, allow_none=True)
        self.atol = check_tolerance("atol", atol)

    def observer(self) -> Any:
        check = self

        def on_train_start(self: Any, trainer: Any, module: Any) -> None:
            # Where this fit began (a resumed one past step 0) and whether Lightning can
            # resume its loader mid-epoch: the state must then be in the loader itself.
            loaders = trainer.train_dataloader
            flat = loaders if isinstance(loaders, (list, tuple)) else [loaders]
            resumable = all(
                hasattr(d, "state_dict") and hasattr(d, "load_state_dict") for d in flat
            )
            facts = {"start": trainer.global_step, "resumable": resumable}
            observe(check.name, trainer, facts)

        def on_train_end(self: Any, trainer: Any, module: Any) -> None:
            names, sums = checksums(module)
            facts = {"names": names, "sums": sums, "epoch_batches": trainer.num_training_batches}
            observe(check.name, trainer, facts)

        hooks = {"on_train_start": on_train_start, "on_train_end": on_train_end}
        return observer_class("ResumeEquivalenceObserver", hooks)()

    def judge(self, evidence: Evidence) -> list[Violation]:
        return []  # needs the restart: see judge_reruns

    def judge_reruns(self, full: Evidence, rerun: Rerun, scratch: Path) -> list[Violation]:
        finals = self._finals(full)
        if not finals or len(finals) < len(full.ranks):
            # The run did not finish on every rank (a fault cut it short, or it failed on
            # its own, which the run's own verdict reports): there is nothing to compare.
            return []
        # A fresh directory per judgement: a restart must never resume from a checkpoint
        # an earlier example left behind (that made replays disagree with the search).
        workdir = Path(tempfile.mkdtemp(prefix="resume-", dir=scratch))
        if getattr(full.schedule, "restarts", 0) and not faults_leave_training_alone(full):
            return []  # a fault that may change training (a repeated batch) fired
        try:
            # The reference is uninterrupted *and fault-free*: a run that recovered from
            # a fault (a skipped batch) may end elsewhere without any resume bug.
            reference = finals if not full.schedule else self._finals(rerun(Schedule()))
            if getattr(full.schedule, "restarts", 0):
                # The schedule crashed and restarted the job itself: judge that restart.
                return self._compare(reference, finals, None, self._mid_epoch(full))
            per_epoch = int(next(iter(finals.values()))["epoch_batches"])
            step = self.crash_at_step if self.crash_at_step is not None else per_epoch
            return self._crash_and_restart(reference, rerun, workdir, step, per_epoch)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _mid_epoch(self, evidence: Evidence) -> bool:
        """The last fit resumed mid-epoch with a loader Lightning cannot resume there."""
        starts = [f for _, f in evidence.observations(self.name) if "start" in f]
        per_epoch = [int(f["epoch_batches"]) for f in self._finals(evidence).values()]
        if not starts or not per_epoch or per_epoch[0] <= 0:
            return False
        last = starts[-1]
        return last["start"] % per_epoch[0] != 0 and not last["resumable"]

    def _crash_and_restart(
        self,
        finals: dict[int, dict[str, Any]],
        rerun: Rerun,
        workdir: Path,
        step: int,
        per_epoch: int,
    ) -> list[Violation]:
        crash = Crash(site="lightning.on_train_batch_start", step=step)
        rerun(Schedule([crash]), workdir=workdir)
        checkpoints = sorted(workdir.rglob("*.ckpt"), key=lambda p: p.stat().st_mtime)
        if not checkpoints:
            message = f"no checkpoint was written before the crash at step {step}"
            return [
                Violation(
                    self.name,
                    message + ": the restart has nothing to resume from",
                    step=step,
                    cause=self.cause,
                )
            ]
        last = next((p for p in checkpoints if p.name == "last.ckpt"), checkpoints[-1])
        again = rerun(Schedule(), workdir=workdir, resume_from=str(last))
        mid_epoch = self._mid_epoch(again) or (per_epoch > 0 and step % per_epoch != 0)
        return self._compare(finals, self._finals(again), step, mid_epoch)

    def _finals(self, evidence: Evidence) -> dict[int, dict[str, Any]]:
        return {e.rank: f for e, f in evidence.observations(self.name) if "sums" in f}

    def _compare(
        self,
        full: dict[int, dict[str, Any]],
        resumed: dict[int, dict[str, Any]],
        step: int | None,
        mid_epoch: bool,
    ) -> list[Violation]:
        """The first rank and parameter where the restarted run ends elsewhere. After a
        mid-epoch resume of a loader Lightning cannot resume there, it is a warning with
        Lightning's own reason: a correct program may then end elsewhere."""
        where = f"a crash at step {step}" if step is not None else "the schedule's fault"
        for rank, facts in sorted(full.items()):
            other = resumed.get(rank)
            if other is None:
                return [self._violation("the restarted run did not finish training", rank, step)]
            for name, x, y in zip(facts["names"], facts["sums"], other["sums"], strict=False):
                diff = max(abs(p - q) for p, q in zip(x, y, strict=True))
                if (self.atol == 0.0 and x != y) or diff > self.atol:
                    message = (
                        f"after {where} and a restart, parameter {name!r} ends differently "
                        f"than an uninterrupted fault-free run (checksum difference {diff:.3g})"
                    )
                    return [self._violation(message, rank, step, warning=mid_epoch)]
        return []

    def _violation(
        self, message: str, rank: int, step: int | None, warning: bool = False
    ) -> Violation:
        cause = LIGHTNING_MID_EPOCH if warning else self.cause
        return Violation(self.name, message, rank=rank, step=step, cause=cause, warning=warning)


def faults_leave_training_alone(evidence: Evidence | Outcome) -> bool:
    """Every fault that fired ended its run (a crash, a preemption) or cannot change
    training (a benign fault); in the last run only benign ones fired."""
    budget = budget_of(evidence.schedule)
    for run in (*evidence.attempts, evidence):
        last = run is evidence
        fired = parse_fired(run.events)
        if fired.unreadable:
            return False
        for fault in (f.fault for f in fired):
            if fault.fault_class(budget) == Severity.BENIGN:
                continue
            if last or not (fault.kills_process or fault.acts_later):
                return False
    return True


# Lightning's own words when it resumes a plain loader mid-epoch (training_epoch_loop.py).
LIGHTNING_MID_EPOCH = (
    "the restart resumed mid-epoch and Lightning warns: \"You're resuming from a checkpoint "
    "that ended before the epoch ended and your dataloader is not resumable. This can "
    'cause unreliable results if further training is done." Checkpoint at epoch ends or '
    "use a resumable (stateful) loader"
)
