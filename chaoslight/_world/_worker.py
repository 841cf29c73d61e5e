"""The child side of a World: one rank, started once, running example after example.

Started as ``python -m chaoslight._world._worker CMD_FD CTL_FD MSG_FD``. Commands arrive
as JSON lines on CMD_FD, read by the main thread between examples: ``init`` (create the
gloo group), ``resolve`` (import a target), ``run`` (one example), ``exit``. CTL_FD
carries ``dump`` (where are you now?), answered by a reader thread even while the main
thread is stuck. Replies leave as JSON lines on MSG_FD (stdout and stderr belong to the
target): ``ready``, ``store``, ``inited``, ``resolved``, ``beat``, ``hang``, ``snapshot``,
``result``. End of file on either command pipe means the parent is gone.

During an example the watchdog thread looks at the main thread every ``TICK_S``: a
``beat`` goes up every second, and every ``FRONT_EVERY_S`` while the main thread is
blocked in a collective, carrying that collective (``front``, see ``_wavefront``). A
``dump`` with ``hung`` (the parent saw the ranks' collectives part ways) is answered with
a ``hang`` report; one with ``release`` shuts the process group's connections down, so
that gloo lets the rank go at once.
"""

from __future__ import annotations

import base64
import contextlib
import faulthandler
import gc
import importlib
import json
import os
import pickle
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

from chaoslight._report import ExceptionInfo
from chaoslight._runtime import PROGRESS_SITES, HangReport, Watchdog, inject
from chaoslight._runtime._protocol import observed_sites
from chaoslight._runtime._stacks import dump_stacks, snapshot
from chaoslight._schedule import Schedule
from chaoslight._world._isolation import Baseline
from chaoslight._world._slot import (
    PATH_VARIABLE,
    PRELOAD_VARIABLE,
    ROOT_VARIABLE,
    torchrun_variables,
)
from chaoslight._world._target import Target, load_target
from chaoslight._world._wavefront import (
    FRONT_EVERY_S,
    REPORT_AFTER_S,
    TICK_S,
    GlooSockets,
    Tracker,
    only_group,
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


class Channel:
    """JSON lines to the parent (thread-safe); commands for the main thread on one pipe,
    ``dump`` requests on another, read by a thread so they are answered while stuck."""

    def __init__(self, cmd_fd: int, ctl_fd: int, msg_fd: int) -> None:
        self.out = msg_fd
        self.lock = threading.Lock()
        self.cmd = os.fdopen(cmd_fd, "rb")
        self.on_dump: Callable[[dict[str, Any]], None] = lambda msg: None
        self.reader = threading.Thread(target=self._read, args=(ctl_fd,), daemon=True)

    def send(self, **msg: Any) -> None:
        data = memoryview((json.dumps(msg) + "\n").encode())
        with self.lock:
            try:
                while data:
                    data = data[os.write(self.out, data) :]
            except OSError:
                orphaned()

    def commands(self) -> Iterator[dict[str, Any]]:
        """The parent's commands, read by the main thread itself (no thread hand-off)."""
        for line in self.cmd:
            yield json.loads(line)
        orphaned()  # end of file: the parent is gone

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as stream:
            for line in stream:
                self.on_dump(json.loads(line))
        orphaned()


def orphaned() -> None:
    """The parent went away: remove the World's files (nobody else will), then take this
    process and anything it started down at once."""
    root = os.environ.get(ROOT_VARIABLE)
    if root:
        shutil.rmtree(root, ignore_errors=True)
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os._exit(1)


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


def _value(value: Any) -> dict[str, Any]:
    try:
        text = repr(value)
    except Exception as exc:
        text = f"<unrepresentable {type(value).__name__}: {exc}>"
    try:
        data = pickle.dumps(value)
        blob = base64.b64encode(data).decode() if len(data) <= MAX_VALUE_BYTES else None
    except Exception:
        blob = None
    return {"value": blob, "value_repr": text[:2000]}


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
        handlers = {"init": self.init, "resolve": self.resolve, "run": self.run}
        for msg in self.channel.commands():
            if msg["op"] == "exit":
                return
            handlers[msg["op"]](msg)

    # -- the process group ------------------------------------------------------------
    def init(self, msg: dict[str, Any]) -> None:
        """(Re)create the gloo group on a fresh store; rank 0 hosts it on a free port."""
        import torch.distributed as dist

        self.release()
        rank, size, gen = msg["rank"], msg["size"], msg["gen"]
        self.rank = rank
        os.environ.update(torchrun_variables(rank, size, ADDRESS))
        try:
            wait = timedelta(seconds=STORE_TIMEOUT_S)
            if rank == 0:
                store = dist.TCPStore(ADDRESS, 0, size, True, timeout=wait, wait_for_workers=False)
                self.channel.send(op="store", gen=gen, port=store.port)
            else:
                store = dist.TCPStore(ADDRESS, msg["port"], size, False, timeout=wait)
            os.environ["MASTER_PORT"] = str(store.port)
            self.timeout = float(msg["timeout"])
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
            self.channel.send(op="inited", gen=gen, ok=False, error=f"{type(exc).__name__}: {exc}")
            return
        self.channel.send(op="inited", gen=gen, ok=True)

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

    def settle(self, clean: bool) -> str:
        """After an example: ``ok`` (group kept), ``destroyed`` (to release peers) or ``lost``."""
        import torch.distributed as dist

        if not dist.is_initialized() or dist.group.WORLD is not self.group:
            self.release()  # the target destroyed the group (or replaced it)
            return "lost"
        if not clean:
            self.release()
            return "destroyed"
        return "ok"

    def set_timeout(self, timeout: float) -> None:
        from torch.distributed.distributed_c10d import _set_pg_timeout

        if timeout != self.timeout and self.group is not None:
            _set_pg_timeout(timedelta(seconds=timeout + PG_MARGIN_S), self.group)
            self.timeout = timeout

    # -- examples ---------------------------------------------------------------------
    def load(self, doc: dict[str, Any]) -> Callable[[], Any]:
        target = Target.from_dict(doc)
        if target not in self.targets:
            self.targets[target] = load_target(target)
        return self.targets[target]

    def resolve(self, msg: dict[str, Any]) -> None:
        try:
            self.load(msg["target"])
        except Exception as exc:
            self.channel.send(op="resolved", id=msg["id"], ok=False, error=str(exc))
            return
        self.channel.send(op="resolved", id=msg["id"], ok=True)

    def run(self, msg: dict[str, Any]) -> None:
        self.current, self.hang = msg["id"], None
        self.tracker.reset()
        self.sent_at, self.sent_front = 0.0, False
        self.set_timeout(float(msg["timeout"]))
        environ = self.baseline.enter(msg["workdir"])
        try:
            reply = self.call(msg)
        finally:
            self.baseline.restore(environ)
        self.current = None
        reply["group"] = self.settle(clean=reply["status"] == "passed" and self.hang is None)
        self.channel.send(
            op="result", id=msg["id"], rank=self.rank, hung=self.hang is not None, **reply
        )
        gc.collect()  # after replying: this example's DDP reducer goes while its group lives
        gc.freeze()  # what survives an example is long-lived: later collections skip it

    def call(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Run the target once under the schedule and the watchdog; never raises."""
        try:
            target = self.load(msg["target"])
            schedule = Schedule.from_json(msg["schedule"])
            checks = unpickle_checks(msg.get("checks"))
            observed = PROGRESS_SITES | observed_sites(checks)
            with (
                inject(
                    schedule,
                    events_file=msg["events"],
                    observe=observed,
                    checks=checks,
                    judge=False,
                    resume_from=msg.get("resume_from"),
                    allow_crash=True,  # a rank is a process of its own: a crash kills only it
                    trace=bool(msg.get("trace")),
                ),
                self.dog.watching(float(msg["timeout"])),
            ):
                value = target()
        except BaseException as exc:
            return {"status": "failed", "exception": exception_info(exc).to_dict()}
        return {"status": "passed", **_value(value)}

    def on_hang(self, report: HangReport) -> None:
        self.hang = report
        self.channel.send(
            op="hang", id=self.current, rank=self.rank, line=report.line(), stacks=report.stacks
        )

    def beat(self) -> None:
        """Every tick: a beat each second, or sooner with the collective it is blocked in."""
        front = self.tracker.look()
        blocked = front is not None and front.blocked_s >= REPORT_AFTER_S
        since = time.monotonic() - self.sent_at
        if blocked != self.sent_front or since >= (FRONT_EVERY_S if blocked else BEAT_S):
            self.sent_at, self.sent_front = time.monotonic(), blocked
            doc = front.to_dict() if front is not None and blocked else None
            self.channel.send(op="beat", id=self.current, front=doc)

    def dump(self, msg: dict[str, Any]) -> None:
        """Answer ``dump`` from the reader thread: where the main thread is, all stacks.

        With ``hung`` (why the parent holds the example hung), report it as a hang; with
        ``release``, shut the process group's connections so gloo raises in the blocked
        collective."""
        if self.current != msg.get("id"):
            return
        if msg.get("release"):
            self.sockets.release()
            return
        position, stacks = snapshot(), dump_stacks()
        why = msg.get("hung")
        if why is None:
            self.channel.send(
                op="snapshot", id=msg["id"], rank=self.rank, line=position.line(), stacks=stacks
            )
            return
        self.hang = HangReport(position, self.timeout or 0.0, stacks)
        line = f"{position.line()}; {why}"
        self.channel.send(op="hang", id=msg["id"], rank=self.rank, line=line, stacks=stacks)


def unpickle_checks(blob: str | None) -> list[Any]:
    """The example's check objects (their observers run here; the parent judges)."""
    return list(pickle.loads(base64.b64decode(blob))) if blob else []


def _prepare() -> None:
    """sys.path as the parent had it, then the heavy imports, paid once per worker."""
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


def main(argv: list[str]) -> None:
    channel = Channel(int(argv[0]), int(argv[1]), int(argv[2]))
    faulthandler.enable()  # a segfault or abort leaves its stack in the worker's log
    channel.reader.start()
    _prepare()
    worker = Worker(channel)
    channel.send(op="ready", pid=os.getpid())
    worker.serve()
    sys.stdout.flush()
    os._exit(0)  # no interpreter teardown: DDP processes sometimes abort there


if __name__ == "__main__":
    main(sys.argv[1:])
