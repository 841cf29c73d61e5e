"""``chaoslight.World``: a persistent pool of DDP ranks that runs example after example."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import weakref
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from chaoslight._report import Outcome, overall
from chaoslight._runtime._cpu_budget import prebuild
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
from chaoslight._world._ranks import Ranks
from chaoslight._world._restart import run_with_restarts
from chaoslight._world._slot import Slot, shutdown, start_reaper, worker_environment
from chaoslight._world._target import Target, parse_target
from chaoslight._world._wire import GROUP_KEPT, GROUP_RETIRED, RunExample, encode_pickle

WORLD_TIMEOUT_S = 30.0  # the World's own default (a search's is Settings.timeout)
START_TIMEOUT_S = 180.0  # importing torch and Lightning in every rank at once


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
        python = python or sys.executable
        self._root = Path(tempfile.mkdtemp(prefix="chaoslight-world-"))
        env = worker_environment(list(sys.path), tuple(preload), str(self._root))
        self._ranks = Ranks(size, spares, python, env, self._root, self.start_timeout)
        reaper = start_reaper(python, str(self._root))
        self._finalizer = weakref.finalize(
            self,
            shutdown,
            os.getpid(),
            self._ranks.every,
            self._ranks.selector,
            str(self._root),
            reaper,
            self._ranks.servers,
        )
        self.closed = False
        try:
            if fork and supported():
                self._ranks.start_servers()
            self._ranks.spawn_missing()
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
        return [slot.pid for slot in self._ranks.live() if not slot.dead]

    @property
    def processes(self) -> list[int]:
        """Every process the World holds: the workers (spares included) and the fork
        servers they come from."""
        return [slot.pid for slot in self._ranks.every] + [s.proc.pid for s in self._servers]

    @property
    def _servers(self) -> list[ForkServer]:
        return self._ranks.servers

    def start(self, timeout: float = WORLD_TIMEOUT_S) -> World:
        """Wait until every rank (and spare) is up and the process group exists.

        ``run`` does this itself, except waiting for the spares.
        """
        self._check_open()
        self._ranks.prepare(check_seconds("timeout", timeout))
        self._ranks.await_ready(self._ranks.spares)
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
        if plan.memory_budget is not None:
            prebuild()  # the CPU budget's allocator, here: a rank's build would eat its timeout
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
                self._ranks.prepare(timeout)  # a crash in the last run replaced workers
                self._ranks.resolve(spec)
                return self._example(spec, again, timeout, blob, workdir, resume_from, trace)

            outcome = rerun()
            return apply_checks(checked, outcome, rerun, self._root)
        except InvalidArgument:
            raise
        except BaseException:
            self._ranks.abandon()  # e.g. Ctrl-C mid-example: the ranks' state is unknown
            raise

    def renew(self) -> World:
        """Replace every rank's worker by a new process, in a new process group: what runs
        next shares no process, module state or thread with what ran before, as in a new
        World. Where ranks fork this costs milliseconds, not the imports of a new World
        (the fork servers never run a target: they only import)."""
        self._check_open()
        self._ranks.renew()
        return self

    def close(self) -> None:
        """Kill every worker (and what it started) and remove the World's files."""
        self.closed = True
        self._finalizer()

    def _check_open(self) -> None:
        if self.closed:
            raise ChaosError("this World is closed; create a new chaoslight.World")

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
        number = self._ranks.next_command()
        slots = self._ranks.live()
        folder = self._root / f"example-{number:05d}"
        work = workdir if workdir is not None else folder / "work"
        work.mkdir(parents=True, exist_ok=True)
        folder.mkdir(parents=True, exist_ok=True)
        example = Example(number, slots, timeout, folder, self._ranks.selector)
        text = plan.to_json(indent=None)
        run = RunExample(
            example.ident, spec, text, timeout, str(work), "", checks, resume_from, trace
        )
        ledger = str(example.ledger)  # the example's: what its faults damage goes back here
        for slot in slots:
            slot.send(replace(run, events=str(example.events_path(slot.rank)), ledger=ledger))
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
                self._ranks.group_ok = False
        self._ranks.spawn_missing()
