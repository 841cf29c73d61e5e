"""What the launcher sees: a job that reports success after a preemption or a hard fault
must have finished its planned training.

A scheduler reads one thing of a job: its exit status. 0 means done, and a done job is
not requeued; anything else (143 after SIGTERM, 1 after an error) gets it requeued or
reported. So a job that was preempted, or hit an error it recovered from, and then
exits 0 on every rank must have trained as far as the same program does with no fault;
else its training is silently cut short. Ranks that stop together, save and exit 143 do
what a correct job does and are not judged here (their verdict is the oracle's).

"Finished" is read from Lightning's own progress counters at the end of each ``fit`` (or
at ``on_exception``), compared fit by fit with a fault-free run of the same example: a
fit finished when it processed as many batches, or took as many optimizer steps, as the
reference's fit (a recovery that skips an optimizer step still processes every batch),
or reached its own ``max_steps``/``max_epochs``. A fit that raised and was retried, or
an extra fit, is skipped over; a restarted job (after a requeue) must reach the
reference's last fit. Where the planned end depends on metrics or time (EarlyStopping,
a Timer or ``max_time``, a reference that set ``trainer.should_stop``), nothing is
judged; a fit that stopped by ``should_stop`` after a hard fault alone is a warning (a
program may stop on metrics the fault changed).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from chaoslight._checks._base import Check, Evidence, Violation, observe, observer_class
from chaoslight._checks._reference import fault_free, note
from chaoslight._runtime._events import budget_of, parse_fired, read_fault
from chaoslight._runtime._preempt import sigterm_deliveries
from chaoslight._runtime._protocol import Rerun
from chaoslight._schedule import Severity

# Callbacks that end a fit by their own decision, on metrics or on the clock.
SELF_STOPPING = ("EarlyStopping", "Timer")
FITTING = "fit"  # Lightning's TrainerFn.FITTING, a str enum


@dataclass(frozen=True)
class FitEnd:
    """Where one ``fit`` ended on one rank: Lightning's progress counters and limits."""

    batches: int
    global_step: int
    epochs: int
    max_steps: int
    max_epochs: int
    should_stop: bool = False
    self_stopping: bool = False  # EarlyStopping or a Timer decides its end
    raised: str = ""  # the exception that ended it ("" when it returned)

    @classmethod
    def of(cls, facts: dict[str, Any]) -> FitEnd:
        return cls(
            int(facts["batches"]),
            int(facts["global_step"]),
            int(facts["epochs"]),
            int(facts["max_steps"]),
            int(facts["max_epochs"]),
            bool(facts.get("should_stop")),
            bool(facts.get("self_stopping")),
            str(facts.get("raised", "")),
        )

    @property
    def limits(self) -> tuple[int, int]:
        return self.max_steps, self.max_epochs

    def at_limit(self) -> bool:
        """Lightning's own end of a fit: ``max_steps`` or ``max_epochs`` reached."""
        steps = self.max_steps > 0 and self.global_step >= self.max_steps
        return steps or (self.max_epochs > 0 and self.epochs >= self.max_epochs)

    def reached(self, planned: FitEnd) -> bool:
        """This fit trained as far as ``planned``, a fault-free run's fit of the same limits."""
        if self.limits != planned.limits:
            return False
        return (
            self.batches >= planned.batches
            or self.global_step >= planned.global_step
            or self.at_limit()
        )

    def short_of(self, planned: FitEnd) -> str:
        """ "step 4 of 12", with the batches where they are not the steps."""
        text = f"step {self.global_step} of {planned.global_step}"
        if (self.batches, planned.batches) != (self.global_step, planned.global_step):
            text += f" (batch {self.batches} of {planned.batches})"
        return text


Fits = dict[int, list[FitEnd]]  # per rank, in the order the fits ended


@dataclass(frozen=True)
class Struck:
    """What struck a run that then exited 0 on every rank."""

    what: str  # "a preemption (SIGTERM to rank 0 at step 3)", "the injected raise@..."
    preempted: bool  # a SIGTERM was delivered: the program was told to stop


def run_label(number: int, total: int) -> str:
    """How a message names one run of a restarted job (the known-issue table reads it)."""
    return f"run {number} of {total}"


class ExitStatus(Check):
    """A job that exits 0 on every rank after a preemption or a hard fault has finished
    its planned training, as a fault-free run of it does.

    World only (it needs a fault-free reference run and the ranks' exit statuses). A
    violation holds however the run ended: the oracle fails the run on it even where
    the faults let it fail cleanly.
    """

    name = "exit-status"
    cause = (
        "the program stops on SIGTERM or after an error (trainer.should_stop, a caught "
        "exception, Lightning's SIGTERMException) and then exits 0: after saving, exit "
        "non-zero (sys.exit(143), 128 + SIGTERM) so the scheduler requeues the job"
    )

    def observer(self) -> Any:
        check = self

        def on_fit_end(self: Any, trainer: Any, module: Any) -> None:
            observe(check.name, trainer, _fit_facts(trainer))

        def on_exception(self: Any, trainer: Any, module: Any, exception: BaseException) -> None:
            if getattr(trainer.state, "fn", None) == FITTING:
                facts = _fit_facts(trainer) | {"raised": type(exception).__name__}
                observe(check.name, trainer, facts)

        hooks = {"on_fit_end": on_fit_end, "on_exception": on_exception}
        return observer_class("ExitStatusObserver", hooks)()

    def judge(self, evidence: Evidence) -> list[Violation]:
        return []  # needs the ranks' exit statuses and a reference run: judge_reruns

    def judge_reruns(self, evidence: Evidence, rerun: Rerun, scratch: Path) -> list[Violation]:
        if note(self, evidence):
            return []  # a fault-free run: kept as the reference, nothing to judge
        runs = (*evidence.attempts, evidence)
        judged = [(n, run, hit) for n, run in enumerate(runs, 1) if (hit := _struck(run))]
        if not judged:
            return []  # no run reported success after a preemption or a hard fault
        references = fault_free(self, evidence, rerun, 1)
        if not references:
            return []  # the program fails with no fault: its own verdict says so
        planned = self.fits(references[0])
        ends = [fit for fits in planned.values() for fit in fits]
        if not ends or any(fit.should_stop or fit.self_stopping for fit in ends):
            return []  # the planned end depends on metrics or time: not judged
        for number, run, struck in judged:
            # A real scheduler would not have requeued a run that exited 0; the World did.
            label = (
                f"{run_label(number, len(runs))} (then requeued), " if number < len(runs) else ""
            )
            violation = self._judge_run(self.fits(run), planned, struck, label, number > 1)
            if violation is not None:
                return [replace(violation, run=number)]
        return []

    def fits(self, evidence: Evidence) -> Fits:
        found: Fits = {}
        for event, facts in evidence.observations(self.name):
            found.setdefault(event.rank, []).append(FitEnd.of(facts))
        return found

    def _judge_run(
        self, fits: Fits, planned: Fits, struck: Struck, label: str, restarted: bool
    ) -> Violation | None:
        for rank, wanted in sorted(planned.items()):
            # A restarted job resumes where it left off: only the last fit must be reached.
            skipped = len(wanted) - 1 if restarted else 0
            short = _first_unreached(fits.get(rank, []), wanted[skipped:])
            if short is None:
                continue
            index, closest, reference = short
            which = f" in fit {skipped + index + 1} of {len(wanted)}" if len(wanted) > 1 else ""
            stopped = (
                f"stopped at {closest.short_of(reference)}"
                if closest is not None
                else f"stopped before training (planned: {reference.global_step} steps)"
            )
            message = (
                f"{label}reports success (every rank exited 0) after {struck.what}, but "
                f"{stopped}{which}: a scheduler would not requeue it"
            )
            if closest is not None and closest.should_stop and not struck.preempted:
                return Violation(
                    self.name,
                    f"{message}. Not judged: it stopped by trainer.should_stop, which a "
                    "program may set on metrics the fault changed",
                    rank=rank,
                    step=closest.global_step,
                    warning=True,
                )
            step = closest.global_step if closest is not None else None
            return Violation(self.name, message, rank, step, self.cause, any_end=True)
        return None


def _fit_facts(trainer: Any) -> dict[str, Any]:
    loop = trainer.fit_loop
    names = {cls.__name__ for cb in trainer.callbacks for cls in type(cb).__mro__}
    return {
        "batches": int(loop.epoch_loop.batch_progress.total.completed),
        "global_step": int(trainer.global_step),
        "epochs": int(trainer.current_epoch),
        "max_steps": int(loop.max_steps if loop.max_steps is not None else -1),
        "max_epochs": int(loop.max_epochs if loop.max_epochs is not None else -1),
        "should_stop": bool(trainer.should_stop),
        "self_stopping": any(name in names for name in SELF_STOPPING),
    }


def _struck(run: Evidence) -> Struck | None:
    """What struck a run that exited 0 on every rank: its first preemption delivered, else
    its first hard fault that fired; None when the run is not judged."""
    if not run.ranks or any(view.exit_status != 0 for view in run.ranks.values()):
        return None
    notices = sigterm_deliveries(run.events)
    if notices:
        first = notices[0]
        notice = read_fault(first.fault)
        group = notice is not None and notice.reaches_group()
        to = f"rank {first.rank}" + (" and its process group" if group else "")
        return Struck(f"a preemption (SIGTERM to {to} at step {first.step})", True)
    budget = budget_of(run.schedule)
    for fired in parse_fired(run.events):
        fault = fired.fault
        # A notice that was never delivered did nothing; one that was is counted above.
        if not fault.acts_later and fault.fault_class(budget) == Severity.HARD:
            return Struck(
                f"the injected {fired.text} (rank {fired.rank}, step {fired.step})", False
            )
    return None


def _first_unreached(
    fits: list[FitEnd], wanted: list[FitEnd]
) -> tuple[int, FitEnd | None, FitEnd] | None:
    """The first planned fit no fit of the run reached, in order: ``(its index, the run's
    fit that came closest, the planned fit)``; None when every one was reached. Fits the
    run added (one that raised and was retried) are passed over."""
    position = 0
    for index, planned in enumerate(wanted):
        match = next((i for i in range(position, len(fits)) if fits[i].reached(planned)), None)
        if match is None:
            same = [f for f in fits[position:] if f.limits == planned.limits]
            closest = same[-1] if same else (fits[-1] if fits else None)
            return index, closest, planned
        position = match + 1
    return None
