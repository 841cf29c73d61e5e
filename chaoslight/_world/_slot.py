"""One worker process seen from the parent: its pipes, its log, and how to end it."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from chaoslight._runtime._proc import die_with_parent, exited
from chaoslight._schedule import ChaosError
from chaoslight._world._wire import Command, Dump, Reply, decode, encode


class Process(Protocol):
    """A worker process as the World sees it: ``subprocess.Popen`` or a forked one."""

    returncode: int | None

    @property
    def pid(self) -> int: ...

    def wait(self) -> int: ...


class Forker(Protocol):
    """What forks workers instead of starting interpreters (``_forkserver.ForkServer``)."""

    def fork(self, fds: tuple[int, int, int], log_path: Path) -> Process: ...

    def abort_if_busy(self) -> None: ...

    def close(self) -> None: ...


# The environment contract with the worker processes (read in _worker).
PATH_VARIABLE = "CHAOSLIGHT_WORLD_PATH"
PRELOAD_VARIABLE = "CHAOSLIGHT_WORLD_PRELOAD"
ROOT_VARIABLE = "CHAOSLIGHT_WORLD_ROOT"
LAUNCHER_PREFIXES = ("SLURM_", "PMI_", "OMPI_", "TORCHELASTIC_", "CHAOSLIGHT_")


def torchrun_variables(rank: int, size: int, address: str) -> dict[str, str]:
    """What torchrun's agent sets for rank ``rank`` of a one-node job of ``size`` (the
    master port comes with the store). ``TORCHELASTIC_RUN_ID`` makes Lightning choose its
    ``TorchElasticEnvironment``, as under torchrun: that one leaves ``WORLD_SIZE`` set when
    a fit ends (``LightningEnvironment`` deletes it, and a second Trainer would then
    train alone)."""
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "GROUP_RANK": "0",
        "ROLE_RANK": str(rank),
        "ROLE_NAME": "default",
        "WORLD_SIZE": str(size),
        "LOCAL_WORLD_SIZE": str(size),
        "GROUP_WORLD_SIZE": "1",
        "ROLE_WORLD_SIZE": str(size),
        "MASTER_ADDR": address,
        "TORCHELASTIC_RUN_ID": "chaoslight",
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_USE_AGENT_STORE": "False",  # the World hosts the store itself
    }


# What a launcher may have set in the parent (stripped from the workers' environment):
# torchrun's variables, and the multi-node ones a one-node job lacks.
LAUNCHER_VARIABLES = frozenset(torchrun_variables(0, 1, "")) | {"NODE_RANK", "MASTER_PORT"}


def worker_environment(path: list[str], preload: tuple[str, ...], root: str) -> dict[str, str]:
    """The parent's environment without any launcher's or chaoslight's variables.

    The ranks get torchrun-style variables when their group is created; one thread per
    rank unless the caller chose otherwise (torchrun does the same); gloo on the loopback
    interface unless ``GLOO_SOCKET_IFNAME`` says otherwise.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in LAUNCHER_VARIABLES and not k.startswith(LAUNCHER_PREFIXES)
    }
    if env.get("TORCH_DISTRIBUTED_DEBUG", "").upper() == "DETAIL":
        del env["TORCH_DISTRIBUTED_DEBUG"]  # segfaults DDP construction on CPU (torch 2.13)
    env.setdefault("OMP_NUM_THREADS", "1")
    loopback = loopback_interface()
    if loopback is not None:
        # The ranks meet at 127.0.0.1: without this gloo binds to the interface the host
        # name resolves to, which on a laptop off its network or in a container may be
        # unreachable, and it would expose the ranks' sockets to the network.
        env.setdefault("GLOO_SOCKET_IFNAME", loopback)
    env["PYTHONUNBUFFERED"] = "1"
    env[PATH_VARIABLE] = json.dumps([p or os.getcwd() for p in path])
    env[PRELOAD_VARIABLE] = ",".join(preload)
    env[ROOT_VARIABLE] = root  # removed by the workers if the parent dies without closing
    return env


def loopback_interface() -> str | None:
    """The loopback interface's name (``lo`` on Linux, ``lo0`` on macOS), if there is one."""
    try:
        names = {name for _, name in socket.if_nameindex()}
    except OSError:
        return None
    return next((name for name in ("lo", "lo0") if name in names), None)


class WorkersDidNotStart(ChaosError):
    """The World's rank processes could not start or meet: no such interpreter, a worker
    that died before its handshake, no process group. The machine, not the program."""


class Slot:
    """A worker process: commands go down one pipe (``Dump`` down a second), replies come
    up a third (``_wire``'s messages).

    The worker leads its own session, so ``kill`` takes down anything it started too.
    """

    def __init__(
        self,
        python: str,
        env: dict[str, str],
        log_path: Path,
        server: Forker | None = None,
    ) -> None:
        pipes = [os.pipe() for _ in range(3)]  # commands, dump requests, messages
        (cmd_read, cmd_write), (ctl_read, ctl_write), (msg_read, msg_write) = pipes
        child = (cmd_read, ctl_read, msg_write)
        self.log_path = log_path
        self.proc: Process
        try:
            if server is not None:  # forked by the rank's server, which set the same up
                self.proc = server.fork(child, log_path)
            else:
                with open(log_path, "ab") as log:
                    self.proc = subprocess.Popen(
                        [python, "-m", "chaoslight._world._worker", *map(str, child)],
                        pass_fds=child,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=env,
                        start_new_session=True,
                        # The worker leads its own session, so a signal to the parent's
                        # process group never reaches it, and a rank stuck in a collective
                        # never reads the end of its pipes: the kernel kills it when the
                        # parent dies.
                        preexec_fn=die_with_parent(signal.SIGKILL),
                    )
        except BaseException as exc:
            for fd in (fd for pair in pipes for fd in pair):
                os.close(fd)
            if isinstance(exc, OSError):
                raise cannot_start(python, exc) from None
            raise
        for fd in child:
            os.close(fd)
        os.set_blocking(msg_read, False)
        self.cmd, self.ctl, self.msgs = cmd_write, ctl_write, msg_read
        self.buffer = b""
        self.rank = -1
        self.ready = False
        self.dead = False
        self.resolved: set[Any] = set()  # targets this worker has imported

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def started(self) -> bool:
        """Whether the process exists yet (a fork waits for its server's imports)."""
        return bool(getattr(self.proc, "started", True))  # a Popen child exists once made

    def send(self, msg: Command) -> bool:
        """Write one command (``Dump`` goes to the reader thread); False if the worker is gone."""
        data = memoryview(encode(msg))
        fd = self.ctl if isinstance(msg, Dump) else self.cmd
        try:
            while data:
                data = data[os.write(fd, data) :]
        except OSError:
            return False
        return True

    def read(self) -> tuple[list[Reply], bool]:
        """Every complete message available now, and whether the pipe has reached its end."""
        chunks = []
        eof = False
        while True:
            try:
                chunk = os.read(self.msgs, 1 << 16)
            except BlockingIOError:
                break
            except OSError:
                eof = True
                break
            if not chunk:
                eof = True
                break
            chunks.append(chunk)
        lines = (self.buffer + b"".join(chunks)).split(b"\n")
        self.buffer = lines.pop()
        return [decode(line, Reply) for line in lines if line.strip()], eof

    def reap(self, wait: float = 2.0) -> int | None:
        """The exit status (negative: killed by that signal), waiting up to ``wait`` s.

        What the worker left in its group (a DataLoader worker) is killed first, while the
        unreaped worker still holds the group's id."""
        if self.proc.returncode is None:
            if not exited(self.proc.pid, wait):
                return None
            self._kill_group()
        return self.proc.wait()

    def kill(self) -> None:
        """SIGKILL the worker's whole process group (a stuck gloo rank ignores SIGTERM)."""
        self._kill_group()
        self.dead = True

    def _kill_group(self) -> None:
        # Only while the worker is not reaped: after that its pid, the group's id, may be
        # given to another process, which must never get this signal.
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def close(self) -> None:
        """Kill (if alive), reap, and close the pipes."""
        self.kill()
        self.reap(wait=10.0)
        for fd in (self.cmd, self.ctl, self.msgs):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.cmd = self.ctl = self.msgs = -1

    def output_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def output_since(self, offset: int, limit: int = 20_000) -> str:
        """What the worker printed since ``offset`` (the last ``limit`` characters)."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(offset)
                data = log.read()
        except OSError:
            return ""
        return data[-limit:].decode("utf-8", "replace")


# Module level, so the World's finalizer holds no reference to the World.
# Removes a World's folder once the World's process is gone, however it went: the workers
# cannot (the kernel SIGKILLs them when their parent dies), and a SIGKILLed parent cannot.
REAPER = """
import shutil, sys
sys.stdin.buffer.read()  # returns at EOF: the World closed, or its process died
shutil.rmtree(sys.argv[1], ignore_errors=True)
"""


def start_reaper(python: str, root: str) -> subprocess.Popen[bytes]:
    """A small process that removes ``root`` when the pipe from this process closes."""
    try:
        return subprocess.Popen(
            [python, "-S", "-c", REAPER, root],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C meant for the World's process does not reach it
        )
    except OSError as exc:
        shutil.rmtree(root, ignore_errors=True)
        raise cannot_start(python, exc) from None


def no_group(error: Any) -> WorkersDidNotStart:
    return WorkersDidNotStart(f"World could not create its process group: {error}")


def no_answer(ranks: list[int], op: str) -> WorkersDidNotStart:
    return WorkersDidNotStart(f"World: rank(s) {ranks} did not answer {op!r} in time")


def cannot_start(python: str, exc: OSError) -> WorkersDidNotStart:
    return WorkersDidNotStart(
        f"python={python!r} cannot be started for the World's workers: "
        f"{exc.strerror or exc}; give a Python with chaoslight and torch installed"
    )


def shutdown(
    owner: int,
    every: list[Slot],
    selector: selectors.BaseSelector,
    root: str,
    reaper: Any = None,
    servers: Sequence[Forker] = (),
) -> None:
    """Close a World: in the process ``owner`` that made it only. A child forked from it (a
    DataLoader worker, ``os.fork`` in a test) inherits the World's finalizer, and at its
    exit would otherwise kill the parent's ranks and remove the parent's folder."""
    if os.getpid() != owner:
        return
    live = list(every)
    for slot in live:
        if slot.started:
            slot.kill()
    for server in servers:
        server.abort_if_busy()  # still importing: its forks die with it, none is waited for
    for slot in live:
        with contextlib.suppress(WorkersDidNotStart):  # a server that died took its workers
            slot.close()
    for server in servers:
        server.close()
    selector.close()
    shutil.rmtree(root, ignore_errors=True)
    if reaper is not None:
        with contextlib.suppress(OSError):
            reaper.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            reaper.wait(timeout=5)


def startup_failure(slot: Slot) -> WorkersDidNotStart:
    code = slot.reap()
    tail = slot.output_since(0)[-3000:].rstrip()
    return WorkersDidNotStart(
        f"World worker for rank {slot.rank} exited while starting (status {code}); "
        f"its output ends:\n{tail}"
    )
