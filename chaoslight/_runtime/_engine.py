"""The engine behind ``inject``: decides, per site call, which faults fire, and fires them
(what each kind does is its action, in ``_actions.ACTIONS``).

Every decision is a function of the schedule and what this process has seen (its rank,
the trainer's step, how often each site was called), never of randomness or of other
ranks, so every rank of a job decides alone and the same schedule replays exactly.
Only the calls of the sites where a fault can still fire are matched (``live``,
``_live.py``); the calls of the other armed sites pass through, counted, or, once the
engine hears of every move of the step, do not reach it at all (``_gates.py``).
"""

from __future__ import annotations

import json
import os
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable
from typing import IO, Any

from chaoslight._runtime._actions import ACTIONS, Firing
from chaoslight._runtime._allocator_budget import TrainingDevice
from chaoslight._runtime._clock import Clock
from chaoslight._runtime._context import current_rank, environment_rank, step_of
from chaoslight._runtime._events import FIRED, FREED, NOTE, SURFACED, Event
from chaoslight._runtime._gates import AHEAD_STEPS, OPEN, Decision, Gates
from chaoslight._runtime._live import Counts, Liveness, Tally, steps_that_fire
from chaoslight._runtime._loop_steps import LoopSteps, LoopView
from chaoslight._runtime._memory import MemoryLedger
from chaoslight._runtime._notes import note_never_fired
from chaoslight._runtime._preempt import STEP_SITE, Notices, note_stop, preempts
from chaoslight._runtime._resolve import check_allocation_memory, exception_classes
from chaoslight._runtime._threads import InternalCalls, PerThread, SiteEntry
from chaoslight._schedule._faults import Fault, ReorderReduction
from chaoslight._schedule._model import Schedule
from chaoslight._sites import Behaviour, PatchPoint
from chaoslight._sites._batches import repeat_pending
from chaoslight._sites._reorder import NATURAL


class Engine:
    """The dispatcher the site wrappers call while a schedule is active."""

    def __init__(
        self,
        schedule: Schedule,
        events_file: str | os.PathLike[str] | None = None,
        observe: frozenset[str] = frozenset(),
    ) -> None:
        self.schedule = schedule
        # Observed sites are routed here without faults so a watchdog can see progress.
        self.armed = frozenset(
            schedule.sites | observe | ({STEP_SITE} if preempts(schedule) else set())
        )
        self.last_activity = time.monotonic()
        # Per thread, the sites it is inside, by thread ident (a watchdog reads another
        # thread's): a DataLoader worker thread or a user thread calling a site must
        # neither see the main thread's sites as its own (and skip its faults) nor pop
        # the main thread's entries.
        self._stacks: dict[int, list[SiteEntry]] = {}
        # Counting and deciding happen under this lock, so calls from several threads are
        # all counted; it is never held while the wrapped call runs.
        self._lock = threading.RLock()
        # A CPU budget's allocator, paused while chaoslight's own calls run (``internal``).
        self.quiet_allocations: tuple[Callable[[], None], Callable[[], None]] | None = None
        self.by_site: dict[str, list[tuple[int, Fault]]] = {}
        for index, fault in enumerate(schedule.faults):
            if fault.fires_in(1):  # one process is one run; a World unbinds a later run's
                self.by_site.setdefault(fault.site, []).append((index, fault))
        self.faulted = frozenset(self.by_site)
        # Sites whose faults count calls within a step: an nth with a step, and the number
        # a firing at a step reports (``_fire``).
        in_step = frozenset(f.site for f in schedule if f.step is not None)
        self._counts = Counts(in_step)
        # Names a schedule (a file: data) gives resolve without importing anything new.
        check_allocation_memory(schedule, ranks=1)
        self.exceptions = exception_classes(schedule)
        self.fired: Counter[int] = Counter()
        self.events: list[Event] = []
        self.pending_oom: BaseException | None = None
        self.ledger = MemoryLedger(schedule.memory_budget, current_rank)
        # A launcher sets the rank variables before the process starts: read them once.
        self.environment_rank = environment_rank()
        self.callbacks: list[Any] = []  # check observers, attached to each Trainer seen
        self.resume_from: str | None = None  # a checkpoint for a fit given no ckpt_path
        self._trainer: Any = None
        self.loop = LoopSteps()  # the step, in a process that runs no Trainer
        # Where the rank trains: under a budget, on a CUDA card, the allocator's limit.
        self.device = TrainingDevice(self.ledger)
        self._tally = Tally()
        self._local = PerThread(self._stacks, self._tally.counter)
        self._sink: IO[str] | None = open(events_file, "a") if events_file else None  # noqa: SIM115
        self.notices = Notices(self.record)
        self._tracer: Any = None  # a _trace.Tracer under inject(trace=True)
        indexed = [entry for entries in self.by_site.values() for entry in entries]
        # Under preemption the steps a rank trained are read off its training steps: counted
        # whatever fires (``note_stop``).
        watched = frozenset(observe) | ({STEP_SITE} if preempts(schedule) else frozenset())
        self._liveness = Liveness(indexed, watched)
        self._fault_steps = frozenset(step for step in self._liveness.by_step if step is not None)
        self.live: frozenset[str] = frozenset()  # the armed sites whose calls are matched now
        # The clock: the rank and step decided at, and whether every move is heard of.
        self.clock = Clock(self.environment_rank, self.step)
        self.trainer_id: int | None = None  # id() of the trainer last seen (``saw_trainer``)
        # Per site, the steps a fault can still fire at on this rank (``_passes_ahead``), until
        # a fault fires or the rank changes.
        self._fire_steps: dict[str, frozenset[int | None]] = {}
        self._fired_key: tuple[int, int] = (-1, 0)  # the rank and firings they hold for
        self.gates = Gates((), self.faulted)  # the patches' gates (``install_gates``)
        self.watching: frozenset[str] | None = None  # what the gates watch now (``_gates``)
        with self._lock:
            self._decide()

    def install_gates(self, installed: list[tuple[PatchPoint, list[Any]]]) -> None:
        """Decide the gates of these patches (``_gates.py``) from now on."""
        with self._lock:
            self.gates = Gates(installed, self.faulted)
            self._decide()

    # -- context ----------------------------------------------------------------------
    def saw_trainer(self, trainer: Any) -> None:
        """``trainer`` runs. A wrapper may skip the call when ``id(trainer)`` is
        ``trainer_id``: the weak reference's callback clears it before the id can be reused."""
        if self._trainer is None or self._trainer() is not trainer:
            # Once it is gone, the step is None: decide again at the next call.
            self._trainer = weakref.ref(trainer, self._stale)
            self.trainer_id = id(trainer)
            self._attach(trainer)
            self.device.tell(_root_device(trainer))
            with self._lock:  # another trainer: another step counter, another step
                self.clock.steady = False
                self._decide()

    def trainer_runs(self, trainer: Any) -> None:
        """``trainer`` enters a fit (or validate, test, predict): until its training loop
        counts a batch, its step may move unheard of (a checkpoint resumed)."""
        self.saw_trainer(trainer)
        with self._lock:
            if self.clock.steady:
                self.clock.steady = False
                self._decide()

    def progress_moved(self) -> None:
        """The running Trainer's training loop counted a batch: the step moved by one."""
        with self._lock:
            if self.clock.steady:
                self._step_moved()
            else:  # its first batch since it entered: every later move is heard of
                self.clock.steady = True
                self._decide()

    def _step_moved(self) -> None:
        """The step moved by one: decide again, unless nothing decided changes."""
        with self._lock:
            if not (self.clock.steady and self._moved_quietly()):
                self._decide()

    def _moved_quietly(self) -> bool:
        """Take a step that changes nothing of what is decided (no fault at the step left
        or the step entered, or within the batches fetched ahead; nothing pending; the
        same process group): count what passed, note the step. True if it was one."""
        clock = self.clock
        steps, (rank, left) = self._fault_steps, clock.period
        entered = self.step()
        if entered is None or entered in steps or left in steps:
            return False
        if self.gates.ahead_sites and not steps.isdisjoint(
            range(entered, entered + AHEAD_STEPS + 1)
        ):
            return False
        if self._tracer is not None or self.ledger.holds or self.pending_oom is not None:
            return False
        if repeat_pending() or self.device.waiting is not None or not clock.same_group:
            return False
        self._tally.fold(self._counts, rank, left)
        clock.advance(entered)
        return True

    def _attach(self, trainer: Any) -> None:
        """Give a newly seen Trainer the checks' observer callbacks (once each)."""
        callbacks = getattr(trainer, "callbacks", None)
        if isinstance(callbacks, list):
            callbacks.extend(cb for cb in self.callbacks if cb not in callbacks)

    @property
    def trainer(self) -> Any:
        return self._trainer() if self._trainer is not None else None

    @property
    def ran_a_trainer(self) -> bool:
        """Whether a Trainer ran in this process (a launcher's own process trains none)."""
        return self._trainer is not None

    def step(self) -> int | None:
        """The training step: the Trainer's once one ran in this process, else the loop's."""
        if self._trainer is not None:
            return step_of(self._trainer())
        return self.loop.step

    def training_began(self, begins: bool = True) -> None:
        if self._trainer is None:
            before = self.loop.step
            self.loop.training_call(begins)
            if self.loop.step != before:
                self._step_moved()

    def mark_step(self) -> None:
        """The program's own end of a loop's step (``chaoslight.mark_step``)."""
        self.loop.mark()
        self._step_moved()

    def step_ended(self, optimizer: Any) -> None:
        if not self.device.known:  # a loop's device: its first optimizer's parameters
            first = next((p for g in optimizer.param_groups for p in g["params"]), None)
            self.device.tell(getattr(first, "device", None))
        self.loop.optimizer_stepped(optimizer)

    def tell_loop_observers(self, hook: str, *args: Any) -> None:
        if self._trainer is None and self.callbacks:  # else a Trainer's own hooks tell them
            self.tell_observers(hook, *args)

    def tell_observers(self, hook: str, *args: Any) -> None:
        for observer in self.callbacks:
            call = getattr(observer, hook, None)
            if callable(call):
                call(*args)  # an observer's hooks run as chaoslight's own code

    @property
    def tensors_owner(self) -> Any:
        """What a flip reads the training tensors of: the Trainer, or a loop's view of the
        optimizer that last stepped (None before one did)."""
        if self._trainer is not None:
            return self.trainer
        optimizer = self.loop.optimizer
        return LoopView(optimizer) if optimizer is not None else None

    # -- which sites can fire (``_live.py``) ------------------------------------------
    @property
    def tracer(self) -> Any:
        """The ``_trace.Tracer`` under ``inject(trace=True)`` (or a check's), or None."""
        return self._tracer

    @tracer.setter
    def tracer(self, tracer: Any) -> None:
        with self._lock:  # a tracer sees every armed call: all are matched while it is set
            self._tracer = tracer
            self._decide()

    def _stale(self, _: object = None) -> None:
        """Make the next call that passes through decide again (a trainer is gone)."""
        self.trainer_id = None
        self.clock.stale()
        self.gates.open_all()

    def _decide_again(self) -> None:
        """Decide again, unless another thread did since the clock moved."""
        with self._lock:
            if self.clock.moved():
                self._decide()

    def _decide(self) -> None:
        """Count what passed through, then decide which sites are live (lock held)."""
        self.device.settle()
        self._tally.fold(self._counts, *self.clock.period)
        rank, step = self.clock.read(self.trainer, self.step)
        if (rank, self.fired.total()) != self._fired_key:  # a fault spent, another rank
            self._fired_key = (rank, self.fired.total())
            self._fire_steps = {}
        if self._tracer is not None or self.ledger.holds:
            self.live = self.armed  # every armed call is traced, or may release a hold
            self.watching = None
            self.gates.open_all()
        else:
            self.live = self._liveness.decide(rank, step, self.fired)
            decision = self._gating(rank, step)
            self.watching = decision.watch
            self.gates.decide(decision)

    def _gating(self, rank: int, step: int | None) -> Decision:
        """What the gates are decided from (``_gates.py``): nothing closes until the engine
        hears of every move of the clock; the rank counts once a process group says it."""
        if not self.clock.steady:
            return OPEN
        known = rank if self.clock.rank_known else None
        loop = self._trainer is None
        # A loop's first batch and forward come before its first backward: step 0's.
        steps = (step, 0) if loop and step is None else (step,)
        gates = self.gates
        return Decision(
            self._liveness.watched(known, steps, self.fired),
            self._liveness.ahead(known, step, AHEAD_STEPS, self.fired)
            if gates.ahead_sites
            else frozenset(),
            loop,
            self.pending_oom is not None,
            repeat_pending(),
        )

    def counts(self) -> Counts:
        """Calls of each armed site on this rank: per site (``calls``), per (site, rank)
        (``reached``), the steps each ran at (``steps_seen``), passed-through calls included."""
        with self._lock:
            self._tally.fold(self._counts, *self.clock.period)
        return self._counts

    def internal(self) -> Any:
        """A context in which chaoslight's own torch calls pass through every site."""
        return InternalCalls(self._local, self.quiet_allocations)

    @property
    def in_progress(self) -> list[SiteEntry]:
        """The sites the main thread is inside, outermost first: (site, call #, step)."""
        return self.in_progress_of(threading.main_thread().ident)

    def in_progress_of(self, thread_id: int | None) -> list[SiteEntry]:
        """The sites thread ``thread_id`` is inside, outermost first (a copy)."""
        return list(self._stacks.get(thread_id or 0, ()))

    # -- the hot path -----------------------------------------------------------------
    def call(
        self,
        site: str,
        wrapped: Any,
        instance: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        behaviour: Behaviour,
    ) -> Any:
        """A call of an armed site. A site that is not live passes straight through,
        counted (``_live.py``); a live one, or one whose calls belong to another step than
        the trainer's (``behaviour.step_of``), is matched against the schedule."""
        __tracebackhide__ = True
        local = self._local
        inside = local.inside
        if local.depth or site in inside:
            return wrapped(*args, **kwargs)  # chaoslight's own call, or nested (super() chains)
        if site in self.live:
            return self._matched(site, wrapped, instance, args, kwargs, behaviour)
        # The way through, inline (``Clock.moved`` spelled out: no frame): every armed call
        # that cannot fire takes it, while its gate is open.
        clock = self.clock
        if clock.steps() != clock.read_steps or clock.group() is not clock.read_group:
            self._decide_again()  # the step or the rank may have changed
            if site in self.live:
                return self._matched(site, wrapped, instance, args, kwargs, behaviour)
        if behaviour.step_of is None:
            local.passed[site] += 1  # counted at the step boundary (``Tally``)
        elif not self._passes_ahead(site, instance, behaviour):
            return self._matched(site, wrapped, instance, args, kwargs, behaviour)
        inside.add(site)
        try:
            return wrapped(*args, **kwargs)
        finally:
            inside.discard(site)

    def _matched(
        self,
        site: str,
        wrapped: Any,
        instance: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        behaviour: Behaviour,
    ) -> Any:
        """A call matched against the schedule: counted, traced, and fired at if due."""
        __tracebackhide__ = True
        local = self._local
        inside = local.inside
        rank, step = current_rank(self.environment_rank), self.step()
        if behaviour.step_of is not None:
            step = behaviour.step_of(self.trainer, instance, step)
        with self._lock:
            if self.ledger.holds and self._release_due(rank, step):
                self._decide()
            call = self._counts.add(site, rank, step)
            firing = self._match(site, rank, step) if site in self.by_site else None
        inside.add(site)
        local.stack.append((site, call, step))
        self.last_activity = time.monotonic()  # a watchdog reads these two
        try:
            if self._tracer is not None:
                self._tracer.enter(site, rank, step, call)
            if firing is None or (not firing.faults and firing.reorder is None):
                return wrapped(*args, **kwargs)
            try:
                return self._fire(site, firing, wrapped, args, kwargs, behaviour)
            finally:  # a fault spent, memory held: where faults can fire changed
                with self._lock:
                    self._decide()
        finally:
            inside.discard(site)
            local.stack.pop()
            self.last_activity = time.monotonic()
            if self._tracer is not None:
                self._tracer.exit(site, rank, step, call)

    def _passes_ahead(self, site: str, instance: Any, behaviour: Behaviour) -> bool:
        """Count a call of a site that is not live but belongs to another step
        (``behaviour.step_of``: a batch fetched ahead), if it cannot fire: True if it passes.

        Such a call may fire although its site is not live at this step; it passes, counted
        at its own step, if none of the site's faults can fire at that step on this rank."""
        assert behaviour.step_of is not None
        rank, now = self.clock.period  # the clock has not moved since they were read
        step = behaviour.step_of(self.trainer, instance, now)
        can_fire = self._fire_steps.get(site)
        if can_fire is None:
            can_fire = steps_that_fire(self.by_site.get(site, ()), rank, self.fired)
            self._fire_steps[site] = can_fire
        if step in can_fire:
            return False
        with self._lock:
            self._counts.defer_one(site, rank, step)  # one call, counted as passed through
        return True

    def _match(self, site: str, rank: int, step: int | None) -> Firing:
        firing = Firing(rank, step)
        counts = self._counts
        for index, fault in self.by_site.get(site, ()):
            if fault.step is not None and fault.step != step:
                continue
            in_step = fault.step is not None
            count = counts.calls_in_step[(site, step)] if in_step else counts.calls[site]
            if fault.nth is not None and count < fault.nth:
                continue
            if fault.times is not None and self.fired[index] >= fault.times:
                continue
            if isinstance(fault, ReorderReduction):
                # Every rank must run the same collective: untargeted ranks sum in rank order.
                on_rank = fault.rank is None or fault.rank == rank
                if on_rank or firing.reorder is None:
                    firing.reorder = fault.order if on_rank else NATURAL
                self.fired[index] += 1
                if on_rank:
                    firing.faults.append(fault)
                continue
            if fault.rank is not None and fault.rank != rank:
                continue
            self.fired[index] += 1
            firing.faults.append(fault)
        return firing

    def _fire(
        self,
        site: str,
        firing: Firing,
        wrapped: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        behaviour: Behaviour,
    ) -> Any:
        __tracebackhide__ = True
        call = self._local.stack[-1][1]
        for fault in firing.faults:
            self.record(
                FIRED,
                site,
                firing.rank,
                firing.step,
                str(fault),
                self._counts.number(site, fault.step, call),
            )
            if fault.aborts() and behaviour.before_abort is not None:
                with self.internal():
                    behaviour.before_abort(wrapped, args, kwargs)
            self._apply(fault, firing)
        return self._call_through(firing, wrapped, args, kwargs, behaviour)

    def _apply(self, fault: Fault, firing: Firing) -> None:
        """Do what ``fault`` does before the call: its kind's action (``ACTIONS``)."""
        __tracebackhide__ = True
        ACTIONS[type(fault)](self, fault, firing)

    def _call_through(
        self,
        firing: Firing,
        wrapped: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        behaviour: Behaviour,
    ) -> Any:
        """The wrapped call as the faults leave it: skipped, reordered, or poisoned after."""
        for wrap in firing.around:
            wrapped = wrap(wrapped)
        if firing.skip and behaviour.skip is not None:
            with self.internal():
                return behaviour.skip(args, kwargs)
        if firing.reorder is not None and behaviour.reduce is not None:
            with self.internal():
                result = behaviour.reduce(wrapped, args, kwargs, firing.reorder)
        else:
            result = wrapped(*args, **kwargs)
        for value in firing.poison:
            if behaviour.poison is not None:
                result = behaviour.poison(result, args, kwargs, value)
        return result

    def _release_due(self, rank: int, step: int | None) -> bool:
        """Release the holds due at ``step``; whether any was."""
        due = self.ledger.release_due(step)
        for hold in due:
            self.record(FREED, "memory", rank, step, hold.fault, detail=f"{hold.nbytes} bytes")
        return bool(due)

    # -- sync points and budget --------------------------------------------------------
    def sync_point(self) -> None:
        with self._lock:  # one thread takes a deferred OOM, exactly once
            error, self.pending_oom = self.pending_oom, None
            if error is not None:
                self._decide()  # the sync points' gates close again
        if error is not None:
            self.record(SURFACED, "sync", current_rank(), self.step(), "", detail=str(error)[:80])
            raise error

    def is_internal(self) -> bool:
        """True in a thread that is inside chaoslight's own calls (``internal()``)."""
        return bool(self._local.depth)

    # -- events -----------------------------------------------------------------------
    def record(
        self,
        kind: str,
        site: str,
        rank: int,
        step: int | None,
        fault: str,
        call: int = 0,
        detail: str = "",
    ) -> None:
        event = Event(
            kind, site, rank, step, time.monotonic(), time.time(), fault, call, detail, os.getpid()
        )
        with self._lock:  # one whole line per event, whichever thread records it
            self.events.append(event)
            if self._sink is not None:
                self._sink.write(json.dumps(event.to_dict()) + "\n")
                self._sink.flush()  # reaches the kernel now, so it survives a SIGKILL

    def close(self) -> None:
        if self.pending_oom is not None:
            self.record(
                NOTE,
                "sync",
                current_rank(),
                self.step(),
                "",
                detail="a deferred OOM was never surfaced: no sync point was reached",
            )
            self.pending_oom = None
        self.notices.close()
        self.clock.reached(self.step())
        note_never_fired(self)
        if self.ran_a_trainer and preempts(self.schedule):
            note_stop(
                self.record,
                current_rank(self.environment_rank),
                self.counts().steps_seen.get(STEP_SITE),
            )
        self.ledger.release_all()
        self.device.release()
        self._close_sink()

    def _close_sink(self) -> None:
        with self._lock:
            if self._sink is not None:
                self._sink.close()
                self._sink = None


def _root_device(trainer: Any) -> Any:
    """The device a Trainer trains on (its strategy's root device), or None."""
    try:
        return trainer.strategy.root_device
    except Exception:  # a Trainer half made, a strategy without one: nothing to read
        return None
