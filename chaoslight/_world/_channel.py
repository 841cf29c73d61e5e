"""A worker's pipes to the parent, seen from the worker: replies up one, commands down
another, ``Dump`` requests down a third (read by a thread, so they are answered while the
main thread is stuck). End of file on a command pipe means the parent is gone."""

from __future__ import annotations

import os
import shutil
import signal
import threading
from collections.abc import Callable, Iterator

from chaoslight._world._slot import ROOT_VARIABLE
from chaoslight._world._wire import Command, Dump, Reply, decode, encode


class Channel:
    """Replies to the parent (thread-safe); commands for the main thread on one pipe,
    ``Dump`` requests on another, read by a thread so they are answered while stuck."""

    def __init__(self, cmd_fd: int, ctl_fd: int, msg_fd: int) -> None:
        self.out = msg_fd
        self.lock = threading.Lock()
        self.cmd = os.fdopen(cmd_fd, "rb")
        self.on_dump: Callable[[Dump], None] = lambda msg: None
        self.reader = threading.Thread(target=self._read, args=(ctl_fd,), daemon=True)

    def send(self, msg: Reply) -> None:
        data = memoryview(encode(msg))
        with self.lock:
            try:
                while data:
                    data = data[os.write(self.out, data) :]
            except OSError:
                orphaned()

    def commands(self) -> Iterator[Command]:
        """The parent's commands, read by the main thread itself (no thread hand-off)."""
        for line in self.cmd:
            yield decode(line, Command)
        orphaned()  # end of file: the parent is gone

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as stream:
            for line in stream:
                self.on_dump(decode(line, Dump))
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
