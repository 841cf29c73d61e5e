"""The process group's TCP connections, found and shut down without killing the rank.

A rank blocked in a gloo collective is released by shutting its group's connections:
gloo raises "Connection closed by peer" in every collective waiting on them, here and in
the peers, and the process lives on (a hang the wavefront decided). The same shutdown
is what a ``pg_abort`` fault does to a rank's group: gloo's own ``abort()`` does nothing
(torch 2.13), and every later collective of the rank fails as on an aborted communicator.
"""

from __future__ import annotations

import contextlib
import os
import socket


def _socket_inodes() -> dict[int, int]:
    """This process's open sockets: file descriptor → socket inode (Linux's /proc)."""
    found = {}
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return {}
    for name in names:
        with contextlib.suppress(OSError, ValueError):
            link = os.readlink(f"/proc/self/fd/{name}")
            if link.startswith("socket:["):
                found[int(name)] = int(link[8:-1])
    return found


class GlooSockets:
    """The process group's TCP connections: the sockets that appeared while it was created,
    less the rendezvous store's. ``release()`` shuts them down, so that gloo raises in
    every collective waiting on them, here and in the peers (the process lives on)."""

    def __init__(self) -> None:
        self.before: set[int] = set()
        self.inodes: set[int] = set()
        self.store_port = -1

    def creating(self) -> None:
        """Call just before ``init_process_group``."""
        self.before, self.inodes = set(_socket_inodes().values()), set()

    def created(self, store_port: int) -> None:
        """Call just after it."""
        self.inodes = set(_socket_inodes().values()) - self.before
        self.store_port = store_port

    def release(self) -> int:
        """Shut the connections down; how many were."""
        return sum(
            _shut(fd, inode, self.store_port)
            for fd, inode in _socket_inodes().items()
            if inode in self.inodes
        )


def _shut(fd: int, inode: int, store_port: int) -> bool:
    """Shut down the connected TCP socket ``fd`` if it is still ``inode`` and not the store's."""
    try:
        copy = os.dup(fd)  # our own descriptor: the number may be reused meanwhile
    except OSError:
        return False
    try:
        sock = socket.socket(fileno=copy)
    except OSError:
        os.close(copy)
        return False
    with sock, contextlib.suppress(OSError):
        if os.fstat(copy).st_ino != inode or sock.type != socket.SOCK_STREAM:
            return False
        ends = (sock.getsockname()[1], sock.getpeername()[1])  # OSError: not connected
        if store_port in ends:
            return False
        sock.shutdown(socket.SHUT_RDWR)
        return True
    return False
