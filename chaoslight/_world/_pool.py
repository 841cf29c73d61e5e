"""``chaoslight.World``: a persistent pool of DDP ranks that runs example after example."""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import sys
import tempfile
import time
import weakref
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from chaoslight._report import Outcome, overall
from chaoslight._runtime._inject import ScheduleLike, as_schedule
from chaoslight._runtime._protocol import as_checks, progress_timeout
from chaoslight._runtime._resolve import check_runnable
from chaoslight._schedule._errors import ChaosError, InvalidArgument
from chaoslight._schedule._model import Schedule
from chaoslight._schedule._validate import (
    check_bool,
    check_ranks_fit,
    check_seconds,
    check_world_size,
)
from chaoslight._world._example import Example, Watch
from chaoslight._world._forkserver import ForkServer, supported
from chaoslight._world._judging import apply_checks
from chaoslight._world._pump import Lost, pump
from chaoslight._world._restart import run_with_restarts
from chaoslight._world._slot import (
    Slot,
    WorkersDidNotStart,
    no_answer,
    no_group,
    shutdown,
    start_reaper,
    startup_failure,
    worker_environment,
)
from chaoslight._world._target import Target, parse_target
from chaoslight._world._wire import (
    GROUP_KEPT,
    GROUP_RETIRED,
    Answer,
    Init,
    Inited,
    Resolve,
    Resolved,
    RunExample,
    Store,
    encode_pickle,
)

WORLD_TIMEOUT_S = 30.0  # the World's own default (a search's is Settings.timeout)
START_TIMEOUT_S = 180.0  # importing torch and Lightning in every rank at once
INIT_TIMEOUT_S = 60.0


class World:
    """A pool of ``size`` DDP ranks on this machine (gloo, CPU) that runs many examples.

        with chaoslight.World(size=2) as world:
            outcome = world.run("examples/ddp_train.py:train", schedule, timeout=30)
            outcome.status        # "passed" | "failed" | "hung" | "crashed"

    **The target contract.** ``target`` names an importable callable, as
    ``"path/file.py:function"`` (relative to the current directory; the file's folder goes
    on ``sys.path`` as for a script) or ``"package.module:function"`` (importable with the
    caller's ``sys.path``). Every rank calls it with no arguments. It runs one training:
    builds its ``Trainer(accelerator="cpu", devices=N, strategy="ddp")``, with N from the
    ``WORLD_SIZE`` environment variable (or ``torch.distributed.get_world_size()``), and
    calls ``fit``. Its return value comes back per rank (``outcome.ranks[r].value`` if it
    pickles, ``value_repr`` always).

    Each rank is a worker process started once, with the variables torchrun sets (RANK,
    LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RUN_ID,
    …; OMP_NUM_THREADS=1 and GLOO_SOCKET_IFNAME=lo unless set) and a gloo process group
    already initialised, so Lightning treats the ranks as launched by torchrun
    (``TorchElasticEnvironment``, which keeps ``WORLD_SIZE`` across fits) and reuses the
    group: torch and Lightning are imported once, and a tiny fit costs tens of
    milliseconds. Each example runs in a fresh working directory (also ``TMPDIR``), under
    ``inject(schedule)`` and a hang watchdog; afterwards the worker puts back what targets
    change (the working directory, environment, default dtype, thread count, grad mode,
    RNG state, the handlers of SIGINT, SIGTERM, SIGHUP and SIGUSR1) and recreates the
    process group if the target destroyed it or the example failed.

    ``timeout`` is the hang watchdog's: an example in which no rank reaches a site for
    ``timeout`` seconds is reported ``hung`` within a few seconds more, with each rank's
    position and stacks; gloo's own timeout is set just above it. Ranks blocked in
    differing collectives are reported ``hung`` within about a second, and kept. A rank
    that dies is ``crashed``; the others are released; dead or stuck workers are replaced. On
    ``close`` (also on garbage collection and at interpreter exit) every worker process
    and anything it started is killed.

    ``fork=True`` (Linux): each rank has a fork server that imports torch, Lightning and
    ``preload`` once and forks that rank's workers, so a replaced rank is up in
    milliseconds; each rank keeps its own string-hash seed, as under torchrun. Elsewhere, or
    with ``fork=False``, every worker is a fresh interpreter and ``spares`` of them are kept
    imported, ready to replace a dead rank.
    """

    def __init__(
        self,
        size: int = 2,
        *,
        start_timeout: float = START_TIMEOUT_S,
        preload: tuple[str, ...] = ("lightning.pytorch",),
        spares: int = 1,
        python: str | None = None,
        fork: bool = True,
    ) -> None:
        check_world_size("size", size)
        check_world_size("spares", spares, minimum=0, what="spare")
        check_bool("fork", fork)
        self.size = size
        self.spares = spares
        self.start_timeout = check_seconds("start_timeout", start_timeout)
        self._python = python or sys.executable
        self._root = Path(tempfile.mkdtemp(prefix="chaoslight-world-"))
        self._env = worker_environment(list(sys.path), tuple(preload), str(self._root))
        self._slots: list[Slot | None] = [None] * size
        self._spares: list[Slot] = []  # started and imported, waiting to replace a rank
        self._every: list[Slot] = []  # every worker not yet closed: what shutdown kills
        self._selector = selectors.DefaultSelector()
        self._servers: list[ForkServer] = []  # one per rank, where workers are forked
        reaper = start_reaper(self._python, str(self._root))
        self._finalizer = weakref.finalize(
            self,
            shutdown,
            os.getpid(),
            self._every,
            self._selector,
            str(self._root),
            reaper,
            self._servers,
        )
        self._gen = 0
        self._group_ok = False
        self._count = 0
        self._spawned = 0
        self.closed = False
        try:
            if fork and supported():
                for rank in range(size):
                    log = self._root / f"server-{rank}.log"
                    self._servers.append(
                        ForkServer(rank, self._python, self._env, log, self.start_timeout)
                    )
            self._spawn_missing()
        except BaseException:
            self.close()
            raise

    # -- public -----------------------------------------------------------------------
    def __enter__(self) -> World:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"pids={self.pids}"
        return f"<chaoslight.World size={self.size} {state}>"

    @property
    def pids(self) -> list[int]:
        """The process id of each rank's worker, by rank."""
        return [slot.pid for slot in self._slots if slot is not None and not slot.dead]

    @property
    def processes(self) -> list[int]:
        """Every process the World holds: the workers (spares included) and the fork
        servers they come from."""
        return [slot.pid for slot in self._every] + [s.proc.pid for s in self._servers]

    def start(self, timeout: float = WORLD_TIMEOUT_S) -> World:
        """Wait until every rank (and spare) is up and the process group exists.

        ``run`` does this itself, except waiting for the spares.
        """
        self._check_open()
        self._prepare(check_seconds("timeout", timeout))
        self._await_ready(self._spares)
        return self

    def run(
        self,
        target: str,
        schedule: ScheduleLike = None,
        *,
        timeout: float = WORLD_TIMEOUT_S,
        checks: Iterable[Any] = (),
        trace: bool = False,
    ) -> Outcome:
        """Run ``target`` once in every rank under ``schedule``; see the class docstring.

        ``checks`` (``chaoslight.checks``) observe every rank and are judged here over all
        ranks' observations; a violation makes a passing example ``failed``. A check
        that compares runs (``Deterministic``) has the example run again. ``trace=True``
        records a span per site call in every rank, for ``outcome.to_html()`` (it costs).
        """
        self._check_open()
        spec = parse_target(target)
        plan = as_schedule(schedule)
        check_ranks_fit(plan, self.size)
        check_runnable(plan, self.size)  # exception classes and allocations, before a rank runs
        timeout = check_seconds("timeout", timeout)
        checked = as_checks(checks)  # objects, or names such as "replicas-in-sync"
        timeout = progress_timeout(checked, timeout)
        blob = encode_pickle(checked) if checked else None
        try:

            def rerun(
                schedule: Schedule | None = None,
                workdir: Path | None = None,
                resume_from: str | None = None,
            ) -> Outcome:
                """One run (or a schedule's runs with its restarts) of this example."""
                again = plan if schedule is None else schedule
                if again.restarts and workdir is None:
                    return run_with_restarts(rerun, again, self._root, self.size)
                self._prepare(timeout)  # a crash in the last run replaced workers
                self._resolve(spec)
                return self._example(spec, again, timeout, blob, workdir, resume_from, trace)

            outcome = rerun()
            return apply_checks(checked, outcome, rerun, self._root)
        except InvalidArgument:
            raise
        except BaseException:
            self._abandon()  # e.g. Ctrl-C mid-example: the ranks' state is unknown
            raise

    def close(self) -> None:
        """Kill every worker (and what it started) and remove the World's files."""
        self.closed = True
        self._finalizer()

    # -- workers and the process group ------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise ChaosError("this World is closed; create a new chaoslight.World")

    def _spawn_missing(self) -> None:
        """Give every rank a live worker: a spare if there is one, else a new process."""
        for rank, slot in enumerate(self._slots):
            if slot is not None and not slot.dead:
                continue
            if slot is not None:
                self._drop(slot)
            fresh = self._take_spare() or self._spawn(rank)
            fresh.rank = rank
            self._slots[rank] = fresh
            self._group_ok = False

    def _spawn(self, rank: int | None = None) -> Slot:
        """A new worker: forked by ``rank``'s server where there are servers."""
        self._spawned += 1
        log = self._root / f"worker-{self._spawned}.log"
        server = self._servers[rank] if self._servers and rank is not None else None
        slot = Slot(self._python, self._env, log, server)
        self._selector.register(slot.msgs, selectors.EVENT_READ, slot)
        self._every.append(slot)
        return slot

    def _take_spare(self) -> Slot | None:
        self._drop_dead_spares()
        if not self._spares:
            return None
        spare = next((s for s in self._spares if s.ready), self._spares[0])
        self._spares.remove(spare)
        return spare

    def _drop_dead_spares(self) -> None:
        for spare in [s for s in self._spares if s.dead]:
            self._spares.remove(spare)
            self._drop(spare)

    def _top_up_spares(self) -> None:
        self._drop_dead_spares()
        # A forked worker is up in milliseconds: no spare is kept waiting where ranks fork.
        while len(self._spares) < (0 if self._servers else self.spares):
            self._spares.append(self._spawn())

    def _drop(self, slot: Slot) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(slot.msgs)
        slot.close()
        if slot in self._every:
            self._every.remove(slot)

    def _abandon(self) -> None:
        for slot in self._live():
            slot.kill()
        self._group_ok = False

    def _live(self) -> list[Slot]:
        return [slot for slot in self._slots if slot is not None]

    def _prepare(self, timeout: float) -> None:
        self._spawn_missing()
        self._await_ready(self._live())
        if not self._group_ok:
            self._init_group(timeout)
        self._top_up_spares()  # after the ranks, so they start as fast as they can

    def _await_ready(self, slots: list[Slot]) -> None:
        deadline = time.monotonic() + self.start_timeout
        while not all(slot.ready for slot in slots):
            if time.monotonic() > deadline:
                raise WorkersDidNotStart(f"World workers did not start in {self.start_timeout:g} s")
            for slot, msg in pump(self._selector, min(deadline, time.monotonic() + 1.0)):
                if msg is None and slot in slots:
                    raise startup_failure(slot)

    def _init_group(self, timeout: float) -> None:
        for attempt in range(2):
            try:
                self._try_init(timeout)
                return
            except Lost as lost:
                if attempt:
                    raise startup_failure(lost.slot) from None
                self._abandon()  # the others may wait in the rendezvous: start afresh
                self._spawn_missing()
                self._await_ready(self._live())

    def _try_init(self, timeout: float) -> None:
        self._gen += 1
        gen, slots = self._gen, self._live()
        deadline = time.monotonic() + INIT_TIMEOUT_S
        slots[0].send(Init(0, self.size, gen, port=0, timeout=timeout))
        first = self._replies(slots[:1], (Store, Inited), gen, deadline)[0]
        if isinstance(first, Inited):  # rank 0 could not even host the store
            raise no_group(first.error)
        port = first.port if isinstance(first, Store) else 0
        for slot in slots[1:]:
            slot.send(Init(slot.rank, self.size, gen, port, timeout))
        for reply in self._replies(slots, (Inited,), gen, deadline).values():
            if isinstance(reply, Inited) and reply.error is not None:
                raise no_group(reply.error)
        self._group_ok = True

    def _replies(
        self, slots: list[Slot], kinds: tuple[type[Answer], ...], number: int, deadline: float
    ) -> dict[int, Answer]:
        """Each of ``slots``' answer (one of ``kinds``) to command ``number``, by rank."""
        got: dict[int, Answer] = {}
        while len(got) < len(slots):
            if time.monotonic() > deadline:
                missing = sorted({s.rank for s in slots} - set(got))
                raise no_answer(missing, kinds[-1].OP)
            for slot, msg in pump(self._selector, min(deadline, time.monotonic() + 1.0)):
                if slot not in slots:
                    continue
                if msg is None:
                    raise Lost(slot)
                if isinstance(msg, kinds) and msg.answers == number:
                    got[slot.rank] = msg
        return dict(sorted(got.items()))

    def _resolve(self, spec: Target) -> None:
        """Have every rank import the target before it runs (once per worker): a bad
        target fails here, and the watchdog's clock never counts an import."""
        slots = [slot for slot in self._live() if spec not in slot.resolved]
        if not slots:
            return
        self._count += 1
        for slot in slots:
            slot.send(Resolve(self._count, spec))
        deadline = time.monotonic() + self.start_timeout
        try:
            replies = self._replies(slots, (Resolved,), self._count, deadline)
        except Lost as lost:
            raise startup_failure(lost.slot) from None
        for reply in replies.values():
            if isinstance(reply, Resolved) and reply.error is not None:
                raise InvalidArgument(reply.error)
        for slot in slots:
            slot.resolved.add(spec)

    # -- one example ------------------------------------------------------------------
    def _example(
        self,
        spec: Target,
        plan: Schedule,
        timeout: float,
        checks: str | None = None,
        workdir: Path | None = None,
        resume_from: str | None = None,
        trace: bool = False,
    ) -> Outcome:
        """One example; ``workdir`` (kept afterwards) and ``resume_from`` serve a restart."""
        self._count += 1
        slots = self._live()
        folder = self._root / f"example-{self._count:05d}"
        work = workdir if workdir is not None else folder / "work"
        work.mkdir(parents=True, exist_ok=True)
        folder.mkdir(parents=True, exist_ok=True)
        example = Example(self._count, slots, timeout, folder, self._selector)
        text = plan.to_json(indent=None)
        run = RunExample(
            example.ident, spec, text, timeout, str(work), "", checks, resume_from, trace
        )
        for slot in slots:
            slot.send(replace(run, events=str(example.events_path(slot.rank))))
        example.collect()
        ranks, events = example.results()
        self._recover(slots, example.watches)
        shutil.rmtree(folder, ignore_errors=True)
        return Outcome(overall(ranks), ranks, events, example.wall_s, plan, spec.text, timeout)

    def _recover(self, slots: list[Slot], watches: dict[int, Watch]) -> None:
        """Replace dead workers now; mark the group for re-creation unless every rank kept it."""
        for slot in slots:
            result = watches[slot.rank].result
            if result is not None and result.group == GROUP_RETIRED:
                slot.kill()  # its program still runs in a thread: a new process takes over
            if slot.dead or result is None or result.group != GROUP_KEPT:
                self._group_ok = False
        self._spawn_missing()
