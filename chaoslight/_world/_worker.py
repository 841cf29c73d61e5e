"""The child side of a World: one rank, started once, running example after example.

Started as ``python -m chaoslight._world._worker CMD_FD CTL_FD MSG_FD``; the messages on
those pipes are ``_wire``'s. Commands arrive on CMD_FD, read by the main thread between
examples (``Init``, ``Resolve``, ``RunExample``). CTL_FD carries ``Dump`` (where are you now?),
answered by a reader thread even while the main thread is stuck. Replies leave on MSG_FD
(stdout and stderr belong to the target). End of file on either command pipe means the
parent is gone.

During an example the watchdog thread looks at the main thread every ``TICK_S``: a
``Beat`` goes up every second, and every ``FRONT_EVERY_S`` while the main thread is
blocked in a collective, carrying that collective (``Front``, see ``_wavefront``). A
``Dump`` with ``hung`` (the parent saw the ranks' collectives part ways) is answered with
a ``Hang`` report; one with ``release`` shuts the process group's connections down, so
that gloo lets the rank go at once.
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import importlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

from chaoslight._report import FAILED, PASSED, ExceptionInfo
from chaoslight._runtime import PROGRESS_SITES, HangReport, Watchdog, inject
from chaoslight._runtime._halt import ABORTERS, FREEZE_LISTENERS
from chaoslight._runtime._loader_workers import arm as arm_worker_stacks
from chaoslight._runtime._protocol import observed_sites
from chaoslight._runtime._stacks import hang_stacks, snapshot
from chaoslight._schedule import Schedule
from chaoslight._sites._damage import LEDGER_VARIABLE
from chaoslight._world._channel import Channel
from chaoslight._world._isolation import Baseline, outlived, threads_now
from chaoslight._world._slot import (
    PATH_VARIABLE,
    PRELOAD_VARIABLE,
    ROOT_VARIABLE,
    torchrun_variables,
)
from chaoslight._world._sockets import GlooSockets
from chaoslight._world._target import Target, load_target
from chaoslight._world._wavefront import (
    BOUNDED_WAIT,
    FRONT_EVERY_S,
    REPORT_AFTER_S,
    TICK_S,
    Tracker,
    only_group,
)
from chaoslight._world._wire import (
    Beat,
    Dump,
    Ended,
    Group,
    Hang,
    Init,
    Inited,
    Ready,
    Resolve,
    Resolved,
    RunExample,
    Snapshot,
    Store,
    WireError,
    decode_pickle,
    encode_pickle,
)

ADDRESS = "127.0.0.1"
PG_MARGIN_S = 1.0  # gloo's timeout is the example's plus this, so the watchdog fires first
INTERRUPT_AFTER_S = 1.5  # a hang gloo has not released by then is interrupted by a signal
STORE_TIMEOUT_S = 60.0
BEAT_S = 1.0
MAX_VALUE_BYTES = 16 * 2**20
GLOO_MARKERS = (
    "gloo",
    "Connection closed by peer",
    "Connection reset by peer",
    "pair closure",
    "Timed out waiting",
)


def exception_info(exc: BaseException) -> ExceptionInfo:
    return ExceptionInfo.of(exc, _is_distributed(exc))


def _is_distributed(exc: BaseException) -> bool:
    import torch.distributed as dist

    seen: BaseException | None = exc
    for _ in range(6):
        if seen is None:
            return False
        if isinstance(seen, dist.DistError) or (
            isinstance(seen, RuntimeError) and any(m in str(seen) for m in GLOO_MARKERS)
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def returned(ident: int, rank: int, value: Any) -> Ended:
    """A passing result: the value pickled (None if it does not pickle or is too big to
    send), and its repr."""
    try:
        text = repr(value)
    except Exception as exc:
        text = f"<unrepresentable {type(value).__name__}: {exc}>"
    try:
        blob = encode_pickle(value, MAX_VALUE_BYTES)
    except Exception:
        blob = None
    return Ended(ident, rank, PASSED, value=blob, value_repr=text[:2000])


class Worker:
    """One rank: its process group, its loaded targets, and the example it is running."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.rank = -1
        self.store: Any = None
        self.group: Any = None
        self.timeout: float | None = None
        self.current: int | None = None
        self.hang: HangReport | None = None
        root = os.environ.get(ROOT_VARIABLE)
        self.baseline = Baseline(os.path.join(root, "idle") if root else None)
        self.targets: dict[Target, Callable[[], Any]] = {}
        self.sockets = GlooSockets()
        self.tracker = Tracker(lambda: only_group(self.group))
        self.sent_at = 0.0  # the last beat
        self.sent_front = False  # whether it carried a collective
        # Set just before a freeze for good stops this rank: no beat may follow the one
        # that said so (the parent would take the rank for running again).
        self.stopped_for_good = False
        self.beat_lock = threading.Lock()
        FREEZE_LISTENERS.append(self.freezing)
        self.aborted = False  # a pg_abort fault shut this example's group down
        ABORTERS.append(self.abort_group)
        # One watchdog thread for the worker's life, armed for each example.
        self.dog = Watchdog(
            STORE_TIMEOUT_S,
            self.on_hang,
            interrupt_after=INTERRUPT_AFTER_S,
            on_tick=self.beat,
            tick_every=TICK_S,
        )
        channel.on_dump = self.dump

    def serve(self) -> None:
        for msg in self.channel.commands():
            if isinstance(msg, Init):
                self.init(msg)
            elif isinstance(msg, Resolve):
                self.resolve(msg)
            elif isinstance(msg, RunExample):
                self.run(msg)
            else:  # a Dump belongs on the control pipe
                raise WireError(f"{msg.OP!r} came on the command pipe")

    # -- the process group ------------------------------------------------------------
    def init(self, msg: Init) -> None:
        """(Re)create the gloo group on a fresh store; rank 0 hosts it on a free port."""
        import torch.distributed as dist

        self.release()
        rank, size, gen = msg.rank, msg.size, msg.gen
        self.rank = rank
        os.environ.update(torchrun_variables(rank, size, ADDRESS))
        try:
            wait = timedelta(seconds=STORE_TIMEOUT_S)
            if rank == 0:
                store = dist.TCPStore(ADDRESS, 0, size, True, timeout=wait, wait_for_workers=False)
                self.channel.send(Store(gen, store.port))
            else:
                store = dist.TCPStore(ADDRESS, msg.port, size, False, timeout=wait)
            os.environ["MASTER_PORT"] = str(store.port)
            self.timeout = msg.timeout
            self.sockets.creating()
            dist.init_process_group(
                "gloo",
                store=store,
                rank=rank,
                world_size=size,
                timeout=timedelta(seconds=self.timeout + PG_MARGIN_S),
            )
            self.store, self.group = store, dist.group.WORLD
            self.sockets.created(store.port)
        except Exception as exc:
            self.channel.send(Inited(gen, error=f"{type(exc).__name__}: {exc}"))
            return
        self.channel.send(Inited(gen))

    def release(self) -> None:
        """Free the last example's objects (DDP reducers first), then destroy the group."""
        import torch.distributed as dist

        gc.collect()
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception as exc:  # a broken group: the next init starts afresh anyway
                print(f"chaoslight: destroying the process group failed: {exc}", file=sys.stderr)
        self.group = self.store = None

    def settle(self, clean: bool) -> Group:
        """After an example: the group kept, destroyed (to release peers) or lost."""
        import torch.distributed as dist

        if not dist.is_initialized() or dist.group.WORLD is not self.group:
            self.release()  # the target destroyed the group (or replaced it)
            return Group.LOST
        if not clean:
            # Its connections first: a peer waiting in a collective is released now, not
            # when the collection frees whatever still holds the group (a traceback's frames,
            # a DDP reducer) and the destroy runs, which a loaded machine may make late.
            self.sockets.release()
            self.release()
            return Group.DESTROYED
        return Group.KEPT

    def set_timeout(self, timeout: float) -> None:
        from torch.distributed.distributed_c10d import _set_pg_timeout

        if timeout != self.timeout and self.group is not None:
            _set_pg_timeout(timedelta(seconds=timeout + PG_MARGIN_S), self.group)
            self.timeout = timeout

    # -- examples ---------------------------------------------------------------------
    def load(self, target: Target) -> Callable[[], Any]:
        if target not in self.targets:
            self.targets[target] = load_target(target)
        return self.targets[target]

    def resolve(self, msg: Resolve) -> None:
        try:
            self.load(msg.target)
        except Exception as exc:
            self.channel.send(Resolved(msg.id, error=str(exc)))
            return
        self.channel.send(Resolved(msg.id))

    def run(self, msg: RunExample) -> None:
        self.current, self.hang = msg.id, None
        self.tracker.reset()
        self.sent_at, self.sent_front, self.stopped_for_good = 0.0, False, False
        self.aborted = False
        self.set_timeout(msg.timeout)
        before = threads_now()
        arm_worker_stacks()  # the last example's fit may have reset its handler
        environ = self.baseline.enter(msg.workdir)
        try:
            result = self.call(msg)
            leftovers = outlived(before)
        finally:
            self.baseline.restore(environ)
        self.current = None
        hung = self.hang is not None
        group = self.settle(clean=result.status == PASSED and not hung and not self.aborted)
        if leftovers:
            print(
                f"chaoslight: rank {self.rank} retires: thread(s) {', '.join(leftovers)} the "
                "example started still run the program's code",
                file=sys.stderr,
            )
            group = Group.RETIRED
        self.channel.send(replace(result, hung=hung, group=group))
        gc.collect()  # after replying: this example's DDP reducer goes while its group lives
        gc.freeze()  # what survives an example is long-lived: later collections skip it

    def call(self, msg: RunExample) -> Ended:
        """Run the target once under the schedule and the watchdog; never raises."""
        if msg.ledger:  # the parent restores what the faults damage (environ is put back)
            os.environ[LEDGER_VARIABLE] = msg.ledger
        try:
            target = self.load(msg.target)
            schedule = Schedule.from_json(msg.schedule)
            checks = unpickle_checks(msg.checks)
            observed = PROGRESS_SITES | observed_sites(checks)
            with (
                inject(
                    schedule,
                    events_file=msg.events,
                    observe=observed,
                    checks=checks,
                    judge=False,
                    resume_from=msg.resume_from,
                    allow_crash=True,  # a rank is a process of its own: a crash kills only it
                    trace=msg.trace,
                ),
                self.dog.watching(msg.timeout),
            ):
                value = target()
        except BaseException as exc:
            return Ended(msg.id, self.rank, FAILED, exception=exception_info(exc))
        return returned(msg.id, self.rank, value)

    def on_hang(self, report: HangReport) -> None:
        self.hang = report
        line = report.line()
        if self.tracker.in_collective():
            line += f"; {BOUNDED_WAIT}"  # what a peer of a frozen rank may do (the oracle)
        self.channel.send(Hang(self.current, self.rank, line, report.stacks))

    def beat(self) -> None:
        """Every tick: a beat each second, or sooner with the collective it is blocked in."""
        with self.beat_lock:
            if self.stopped_for_good:
                return
            front = self.tracker.look()
            blocked = front is not None and front.blocked_s >= REPORT_AFTER_S
            since = time.monotonic() - self.sent_at
            if blocked != self.sent_front or since >= (FRONT_EVERY_S if blocked else BEAT_S):
                self.sent_at, self.sent_front = time.monotonic(), blocked
                self.channel.send(Beat(self.current, front if blocked else None))

    def abort_group(self) -> int:
        """A pg_abort fault: shut the group's connections down (gloo has no abort), so that
        every later collective fails; the group is made afresh after the example."""
        self.aborted = True
        return self.sockets.release()

    def freezing(self, seconds: float | None, how: str) -> None:
        """Just before a freeze fault stops this rank (in its thread): tell the parent, so
        the silence that follows is known to be the fault's; a freeze for good lets it
        decide at once that the peers waiting for this rank wait for nothing."""
        with self.beat_lock:
            self.stopped_for_good = seconds is None
            if self.current is not None:
                self.channel.send(Beat(self.current, self.tracker.frozen(seconds)))

    def dump(self, msg: Dump) -> None:
        """Answer ``Dump`` from the reader thread: where the main thread is, all stacks.

        With ``hung`` (why the parent holds the example hung), report it as a hang; with
        ``release``, shut the process group's connections so gloo raises in the blocked
        collective."""
        if self.current != msg.id:
            return
        if msg.release:
            self.sockets.release()
            return
        position, stacks = snapshot(), hang_stacks()
        if msg.hung is None:
            self.channel.send(Snapshot(msg.id, self.rank, position.line(), stacks))
            return
        self.hang = HangReport(position, self.timeout or 0.0, stacks)
        self.channel.send(Hang(msg.id, self.rank, f"{position.line()}; {msg.hung}", stacks))


def unpickle_checks(blob: str | None) -> list[Any]:
    """The example's check objects (their observers run here; the parent judges)."""
    return list(decode_pickle(blob)) if blob else []


def prepare() -> None:
    """sys.path as the parent had it, then the heavy imports, paid once per worker (or
    once per fork server, whose forked workers inherit them)."""
    for entry in reversed(json.loads(os.environ.get(PATH_VARIABLE, "[]"))):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    import torch
    import torch.distributed

    for name in filter(None, os.environ.get(PRELOAD_VARIABLE, "").split(",")):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    with inject(Schedule(), observe=PROGRESS_SITES):  # resolves and imports every patch owner
        torch.zeros(1)
    gc.collect()
    gc.freeze()  # later collections skip everything imported so far


def serve(channel: Channel) -> None:
    """Be a rank until the parent goes: say ready, run its commands, exit without teardown."""
    worker = Worker(channel)
    channel.send(Ready(os.getpid()))
    worker.serve()
    sys.stdout.flush()
    os._exit(0)  # no interpreter teardown: DDP processes sometimes abort there


def main(argv: list[str]) -> None:
    channel = Channel(int(argv[0]), int(argv[1]), int(argv[2]))
    faulthandler.enable()  # a segfault or abort leaves its stack in the worker's log
    channel.reader.start()
    prepare()
    serve(channel)


if __name__ == "__main__":
    main(sys.argv[1:])
