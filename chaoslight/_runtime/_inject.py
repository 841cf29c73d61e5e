"""``chaoslight.inject``: activate a schedule around any code, restore everything after."""

from __future__ import annotations

import os
import sys
import threading
from collections import Counter
from collections.abc import Iterable
from typing import Any

from chaoslight import _sites
from chaoslight._runtime._context import current_rank
from chaoslight._runtime._cpu_budget import stop_budget, watch_budget
from chaoslight._runtime._engine import Engine
from chaoslight._runtime._events import FIRED, Event, render_report, to_jsonl
from chaoslight._runtime._evidence import Evidence, RankView, Violation
from chaoslight._runtime._program import program_probe
from chaoslight._runtime._protocol import as_checks, enter_checks, exit_checks, observed_sites
from chaoslight._runtime._trace import SPAN_KINDS, TRACED_SITES, Tracer
from chaoslight._schedule._errors import (
    CheckFailed,
    InjectionActive,
    InvalidArgument,
    InvalidSchedule,
)
from chaoslight._schedule._faults import OOM, Fault
from chaoslight._schedule._model import Schedule
from chaoslight._schedule._validate import check_bool
from chaoslight._sites import _damage

_LOCK = threading.Lock()
_ACTIVE: Injection | None = None

ScheduleLike = Schedule | Fault | Iterable[Fault] | str | None


def as_schedule(schedule: ScheduleLike) -> Schedule:
    """Accept a Schedule, one fault, a list of faults, or the JSON/text form."""
    if schedule is None:
        return Schedule()
    if isinstance(schedule, Schedule):
        return schedule
    if isinstance(schedule, Fault):
        return Schedule([schedule])
    if isinstance(schedule, str):
        return Schedule.parse(schedule)
    if isinstance(schedule, Iterable):
        return Schedule(schedule)
    raise InvalidArgument(
        f"schedule={schedule!r} must be a Schedule, a fault, a list of faults or text"
    )


def refuse_crashes(schedule: Schedule, allow_crash: Any) -> None:
    """A fault that kills the process it fires in (``Fault.kills_process``: a crash, an
    unhandled preemption) would take the user's pytest session with it in-process."""
    check_bool("allow_crash", allow_crash)
    crash = next((fault for fault in schedule if fault.kills_process), None)
    if crash is not None and not allow_crash:
        raise InvalidSchedule(
            f"{crash} would kill this process (the pytest session with it): run crashes "
            "in a chaoslight.World, or pass inject(..., allow_crash=True)"
        )


class Run:
    """What happened while a schedule was active: the events and the per-site call counts."""

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self.events: list[Event] = []
        self.reached: Counter[tuple[str, int]] = Counter()
        # Sites counted only where one of their faults could fire (their gate closed at the
        # other steps: ``_runtime/_gates.py``): ``reached`` holds only those calls of theirs.
        self.unwatched: frozenset[str] = frozenset()
        self.violations: list[Violation] = []

    def fired(self, site: str | None = None) -> list[Event]:
        """The firing events, optionally only those at ``site``."""
        return [e for e in self.events if e.kind == FIRED and (site is None or e.site == site)]

    def report(self) -> str:
        shown = [e for e in self.events if e.kind not in SPAN_KINDS]  # a trace's spans: thousands
        return render_report(shown, self.reached, self.unwatched)

    def to_jsonl(self) -> str:
        return to_jsonl(self.events)

    def __repr__(self) -> str:
        return f"<Run {len(self.fired())} fired of {len(self.schedule)} faults>"


class Injection:
    """The context manager ``inject()`` returns; entering it yields the ``Run``."""

    def __init__(
        self,
        schedule: ScheduleLike,
        events_file: str | os.PathLike[str] | None = None,
        observe: Iterable[str] = (),
        checks: Iterable[Any] = (),
        judge: bool = True,
        resume_from: str | None = None,
        allow_crash: bool = False,
        trace: bool = False,
    ) -> None:
        self.schedule = as_schedule(schedule)
        refuse_crashes(self.schedule, allow_crash)
        self.judge = judge  # False in a World's rank: the parent judges all ranks together
        self.events_file = events_file
        self.checks = as_checks(checks)
        self.observe = frozenset(observe) | observed_sites(self.checks)
        self.trace = trace
        if trace:  # a span for every site call: every site is armed
            self.observe |= TRACED_SITES
        self.resume_from = resume_from
        self.run = Run(self.schedule)
        self.from_environment = False  # started by CHAOSLIGHT_SCHEDULE, see _autostart
        self._joined = False
        self._engine: Engine | None = None
        self._patches: list[_sites.Patch] = []
        self._budget_mode: Any = None  # what counts a budget: the CPU allocator, or a mode
        self._ledger: _damage.Ledger | None = None  # backups of the files a fault damaged
        self._program: Any = None  # what identifies the program run, for the checks' judges

    def __enter__(self) -> Run:
        global _ACTIVE
        with _LOCK:
            if (
                _ACTIVE is not None
                and _ACTIVE.from_environment
                and _ACTIVE.schedule == self.schedule
            ):
                # The job's launcher already armed this very schedule in this rank (the
                # user's script re-run by Lightning's launcher): join it, do not double it.
                self._joined = True
                self.run = _ACTIVE.run
                return self.run
            if _ACTIVE is not None:
                raise InjectionActive(
                    "inject() is already active in this process (schedule: "
                    f"{_ACTIVE.schedule.to_text() or 'empty'!r}); one schedule per process: "
                    "put all the faults in one Schedule"
                )
            _ACTIVE = self
        try:
            self._engine = Engine(self.schedule, self.events_file, self.observe)
            self._ledger = _damage.begin()
            self._engine.resume_from = self.resume_from
            if self.trace:
                self._engine.tracer = Tracer(self._engine.record)
            self._engine.callbacks = [o for c in self.checks if (o := c.observer()) is not None]
            if self.checks and self.judge:  # which program runs: its references are its own
                self._program = program_probe(sys._getframe(1))
                self._engine.callbacks.append(self._program)
            deferred = any(isinstance(f, OOM) and f.deferred for f in self.schedule)
            points = _sites.points_for(self.schedule.sites | self.observe, deferred_oom=deferred)
            installed = _sites.install(points)
            self._patches = [patch for _, patches in installed for patch in patches]
            self._engine.install_gates(installed)
            _sites.STATE.dispatcher = self._engine
            self._budget_mode = mode = watch_budget(self._engine)
            self._engine.device.stop_counting = lambda: stop_budget(mode)
            self._tell_observers("on_run_start")
            enter_checks(self.checks if self.judge else ())
        except BaseException:
            exit_checks(self.checks if self.judge else ())
            self._teardown()
            raise
        return self.run

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._joined:
            self._joined = False
            return
        # Teardown happens whatever a check's exit() does: nothing may stay patched.
        try:
            limit = self._engine.device.limit if self._engine is not None else None
            if exc is not None and limit is not None and self._engine is not None:
                limit.explain(exc, current_rank(), self._engine.step())
            if self._engine is not None and not self._engine.ran_a_trainer:
                self._tell_observers("on_loop_end")
            failed_exit = exit_checks(self.checks if self.judge else ())
        finally:
            self._teardown()
        if failed_exit is not None:
            raise failed_exit
        if self.checks and self.judge:
            self._judge(exc)

    def _tell_observers(self, hook: str) -> None:
        """Call ``hook()`` on each observer that has it, as chaoslight's own code: what an
        observer records of a run that no Trainer's hooks tell it about (a loop)."""
        engine = self._engine
        if engine is None:
            return
        with engine.internal():
            for observer in engine.callbacks:
                call = getattr(observer, hook, None)
                if callable(call):
                    call()

    def _judge(self, exc: BaseException | None) -> None:
        """Run every check's judge over this process's events; raise on a violation."""
        rank = current_rank()
        view = (  # statuses as text: ``_report.Status`` is a layer above (``RankView``)
            RankView(rank, "passed")
            if exc is None
            else RankView(
                rank, "failed", type(exc).__name__, str(exc).splitlines()[0] if str(exc) else ""
            )
        )
        program = self._program.key if self._program is not None else ""
        evidence = Evidence(self.run.events, {rank: view}, self.schedule, program=program)
        self.run.violations = [v for c in self.checks for v in c.judge(evidence)]
        if self.run.violations and exc is None:
            raise CheckFailed(self.run.violations)

    def _teardown(self) -> None:
        """Unpatch, close the engine and mark nothing active, whatever fails on the way."""
        global _ACTIVE
        _sites.STATE.dispatcher = None
        try:
            stop_budget(self._budget_mode)
            self._budget_mode = None
            _sites.uninstall(self._patches)
        finally:
            try:
                if self._engine is not None:
                    self._engine.close()
                    self.run.events = list(self._engine.events)
                    self.run.reached = Counter(self._engine.counts().reached)
                    self.run.unwatched = frozenset(
                        self._engine.gates.unwatched & self._engine.armed
                    )
            finally:
                with _LOCK:
                    if _ACTIVE is self:
                        _ACTIVE = None
                # The user's files as they were, unless a parent restores them (a World).
                ledger, self._ledger = self._ledger, None
                _damage.end(ledger)

    @property
    def engine(self) -> Engine | None:
        return self._engine


def inject(
    schedule: ScheduleLike = None,
    *,
    events_file: str | os.PathLike[str] | None = None,
    observe: Iterable[str] = (),
    checks: Iterable[Any] = (),
    judge: bool = True,
    resume_from: str | None = None,
    allow_crash: bool = False,
    trace: bool = False,
) -> Injection:
    """Activate ``schedule`` for the ``with`` block; every patch is undone on exit.

    ``with chaoslight.inject(schedule) as run: trainer.fit(model)`` then ``run.events``.
    ``events_file`` appends each event as a JSON line the moment it happens (so a rank
    that is killed still leaves its log). Only one injection may be active per process:
    a second raises ``InjectionActive`` rather than silently skipping faults.
    ``observe`` names extra sites to route through the engine without faults, so a
    watchdog can see progress (``engine.last_activity``, ``engine.in_progress``).
    ``checks`` (``chaoslight.checks``) observe the run and judge it on exit: a violation
    raises ``CheckFailed`` (or, when the block already raised, is kept in
    ``run.violations`` while the block's own exception propagates). ``judge=False``
    only records the checks' observations (a World's parent judges all ranks at once).
    Checks may be given by name (``checks=["replicas-in-sync"]``). ``resume_from`` makes
    a ``fit`` that passes no ``ckpt_path`` resume from that checkpoint, as a restarted
    job does. A ``Crash`` kills the process it fires in, so a schedule holding one is
    refused (``InvalidSchedule``) unless ``allow_crash=True``: run crashes in a
    ``chaoslight.World``, whose ranks are processes of their own. ``trace=True`` records
    an ``enter`` and an ``exit`` event around every site call (all sites armed), which
    the timeline draws as spans; it costs time on every call, so it is off by default.
    A file a fault damaged (the half-written file of a ``torch.save`` that fails) is put
    back as it was on exit, unless the program wrote it again since.
    """
    return Injection(schedule, events_file, observe, checks, judge, resume_from, allow_crash, trace)


def active() -> Injection | None:
    """The injection active in this process, if any."""
    return _ACTIVE


def mark_step() -> None:
    """End the training step here, in a loop that no Trainer runs.

    Outside a Trainer, chaoslight ends a step where an optimizer step ends. A loop with no
    optimizer step, or with several per batch (a GAN's), calls this at the end of each
    step instead; from its first call on, only these calls end steps. It does nothing when
    no schedule is active, and inside a Trainer's fit (whose own batch count stands).
    """
    injection = _ACTIVE
    engine = injection.engine if injection is not None else None
    if engine is not None:
        engine.mark_step()
