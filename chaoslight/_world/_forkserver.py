"""A fork server per rank: one process imports torch, Lightning and chaoslight once, then
forks that rank's workers, so a worker that replaces a dead one is up in milliseconds
instead of the seconds a fresh interpreter spends importing.

One server per rank, not one per World: forked processes share their server's string-hash
seed, and ranks launched by torchrun (or Lightning's own launcher) each have their own, so
a program that iterates a ``set`` of names into collectives must see its ranks disagree
here as it does there. A worker that replaces rank ``r`` keeps rank ``r``'s seed, as a
rank that survives a restart does.

The server is started as ``python -m chaoslight._world._forkserver SOCKET_FD`` with the
workers' environment; requests come on a ``SOCK_SEQPACKET`` socket, one JSON packet each:

- ``{"op": "fork", "log": PATH}`` with the worker's three pipe ends attached: fork, and
  answer ``{"pid": N}`` (or ``{"error": TEXT}``). The child leads its own session, is
  SIGKILLed when the server dies, writes to PATH, and serves the pipes as ``_worker``.
- ``{"op": "reap", "pid": N}``: wait for that child (the parent asks only once it has
  exited), answer ``{"pid": N, "status": CODE}`` (negative: killed by that signal).

End of file on the socket (the World closed, or its process died) ends the server, and
the kernel then SIGKILLs every worker it forked. Linux only (``pidfd_open`` lets the
World wait for a worker that is not its own child); elsewhere workers are started as
fresh interpreters.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from chaoslight._runtime._proc import die_with, die_with_parent
from chaoslight._world._slot import WorkersDidNotStart, cannot_start

MAX_PACKET = 1 << 16
CLOSE_WAIT_S = 5.0


@functools.cache
def supported() -> bool:
    """Whether workers can be forked from a server here: Linux, with ``pidfd_open`` (5.3+)."""
    if not sys.platform.startswith("linux") or not hasattr(os, "pidfd_open"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # an old kernel, or a sandbox that forbids it
        return False
    return True


class Forked:
    """A worker forked by a server, as ``subprocess.Popen`` shows a child: ``pid``,
    ``returncode`` (None until reaped), ``wait()``. Its pid arrives once the server has
    finished importing and forked; asking for it before then waits."""

    def __init__(self, server: ForkServer) -> None:
        self.server = server
        self.known: int | None = None
        self.returncode: int | None = None

    @property
    def started(self) -> bool:
        """Whether the server has forked it and said so (its pid is known)."""
        return self.known is not None

    @property
    def pid(self) -> int:
        while self.known is None:
            if self.returncode is not None:  # its server was killed before it answered
                raise WorkersDidNotStart("World worker was never forked: its server was closed")
            self.server.receive()
        return self.known

    def wait(self) -> int:
        if self.returncode is None:
            self.returncode = self.server.reap(self.pid)
        return self.returncode


class ForkServer:
    """The World's side of one server: fork requests queue in order, and their answers are
    matched to them in that order."""

    def __init__(
        self, rank: int, python: str, env: dict[str, str], log_path: Path, timeout: float
    ) -> None:
        self.rank = rank
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.log_path = log_path
        self.timeout = timeout
        try:
            with open(log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [python, "-m", "chaoslight._world._forkserver", str(theirs.fileno())],
                    pass_fds=(theirs.fileno(),),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,  # a Ctrl-C meant for the World's process skips it
                    preexec_fn=die_with_parent(signal.SIGKILL),
                )
        except OSError as exc:
            ours.close()
            raise cannot_start(python, exc) from None
        finally:
            theirs.close()
        self.sock = ours
        self.waiting: collections.deque[Forked] = collections.deque()  # fork answers due
        self.children: list[Forked] = []
        self.reaped: dict[int, int] = {}

    def fork(self, fds: tuple[int, int, int], log_path: Path) -> Forked:
        """Ask for a worker on these pipe ends (the caller closes its copies afterwards)."""
        request = json.dumps({"op": "fork", "log": str(log_path)}).encode()
        try:
            socket.send_fds(self.sock, [request], list(fds))
        except OSError:
            raise self.gone() from None
        forked = Forked(self)
        self.waiting.append(forked)
        self.children.append(forked)
        return forked

    def reap(self, pid: int) -> int:
        """Wait for the exited worker ``pid`` (the server's child) and return its status."""
        try:
            self.sock.send(json.dumps({"op": "reap", "pid": pid}).encode())
        except OSError:
            raise self.gone() from None
        while pid not in self.reaped:
            self.receive()
        return self.reaped.pop(pid)

    def receive(self) -> None:
        """Read the server's next answer (waiting up to ``timeout`` s) and file it."""
        if not select.select([self.sock], [], [], self.timeout)[0]:
            raise WorkersDidNotStart(
                f"World fork server did not answer in {self.timeout:g} s "
                f"(its output ends: {self.tail()!r})"
            )
        try:
            packet = self.sock.recv(MAX_PACKET)
        except OSError:
            packet = b""
        if not packet:
            raise self.gone()
        self.file(json.loads(packet))

    def file(self, answer: dict[str, Any]) -> None:
        if "status" in answer:
            self.reaped[answer["pid"]] = answer["status"]
        elif "pid" in answer:
            self.waiting.popleft().known = answer["pid"]
        else:
            self.waiting.popleft()
            raise WorkersDidNotStart(f"World fork server could not fork: {answer.get('error')}")

    def abort_if_busy(self) -> None:
        """A World closed while this server still imports: kill it rather than wait. Every
        worker it forked dies with it (their parent-death signal) and is reaped by init,
        so none is signalled or waited for again."""
        if not self.waiting:
            return
        self.proc.kill()
        self.proc.wait()
        with contextlib.suppress(OSError, WorkersDidNotStart):
            while packet := self.sock.recv(MAX_PACKET, socket.MSG_DONTWAIT):
                self.file(json.loads(packet))
        for forked in self.children:
            if forked.returncode is None:
                forked.returncode = -signal.SIGKILL
        self.waiting.clear()

    def gone(self) -> WorkersDidNotStart:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=CLOSE_WAIT_S)  # its socket closed: it is ending
        return WorkersDidNotStart(
            f"World fork server for rank {self.rank} exited (status {self.proc.returncode}); "
            f"its output ends:\n{self.tail()}"
        )

    def tail(self) -> str:
        try:
            return self.log_path.read_bytes()[-3000:].decode("utf-8", "replace").rstrip()
        except OSError:
            return ""

    def close(self) -> None:
        """End the server (its remaining workers die with it) and reap it."""
        with contextlib.suppress(OSError):
            self.sock.close()
        try:
            self.proc.wait(timeout=CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- the server process ---------------------------------------------------------------


def main(argv: list[str]) -> None:
    import faulthandler

    from chaoslight._world import _worker

    faulthandler.enable()
    sock = socket.socket(fileno=int(argv[0]))
    _worker.prepare()
    server = os.getpid()
    while True:
        try:
            packet, fds, _, _ = socket.recv_fds(sock, MAX_PACKET, 3)
        except OSError:
            break
        if not packet:
            break  # the World closed, or its process died
        request = json.loads(packet)
        if request["op"] == "fork":
            answer = _fork(sock, fds, request["log"], server)
        else:
            _, status = os.waitpid(request["pid"], 0)
            answer = {"pid": request["pid"], "status": os.waitstatus_to_exitcode(status)}
        sock.send(json.dumps(answer).encode())
    os._exit(0)


def _fork(sock: socket.socket, fds: list[int], log: str, server: int) -> dict[str, Any]:
    sys.stdout.flush()
    sys.stderr.flush()
    # The answer waits until the child leads its session: a World that kills the group
    # right after must find it (subprocess.Popen returns after the same point).
    settled, told = os.pipe()
    try:
        pid = os.fork()
    except OSError as exc:
        pid = -1
        error = str(exc)
    if pid == 0:
        try:
            sock.close()
            os.close(settled)
            _become_worker(fds, log, server, told)
        finally:
            os._exit(1)  # never back into the server's loop
    os.close(told)
    with contextlib.suppress(OSError):
        os.read(settled, 1)  # empty if the child died first: it still has its pid
    os.close(settled)
    for fd in fds:
        os.close(fd)
    return {"pid": pid} if pid > 0 else {"error": error}


def _become_worker(fds: list[int], log: str, server: int, told: int) -> None:
    """In the forked child: what ``subprocess`` would have set up, then the worker's loop."""
    from chaoslight._world import _worker
    from chaoslight._world._channel import Channel

    os.setsid()  # its own session, as the spawned workers have (see Slot)
    die_with(server, signal.SIGKILL)
    os.write(told, b"s")
    os.close(told)
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    os.close(null)
    main = threading.main_thread()
    if hasattr(main, "_set_native_id"):  # Python < 3.12 keeps the server's thread id after fork
        main._set_native_id()  # read by the wavefront from /proc/self/task/<tid>
    numpy = sys.modules.get("numpy")
    if numpy is not None:  # a fresh interpreter draws numpy's global seed from the OS
        numpy.random.seed()
    channel = Channel(*fds)
    channel.reader.start()
    _worker.serve(channel)


if __name__ == "__main__":
    main(sys.argv[1:])
