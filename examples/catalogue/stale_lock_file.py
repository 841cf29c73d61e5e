"""A lock taken by creating a file: a rank killed while it holds it wedges the restarted job.

Failure mode: at the end of every epoch rank 0 exports the weights (``export.pt``) for an
evaluation service that reads the same directory. So that nobody reads half a file, the
writer takes a lock first, the way many tools do: create ``export.pt.lock`` with
``O_CREAT | O_EXCL`` (waiting while it exists), write, and remove the lock in a
``finally``. A Python exception runs the ``finally``; a process that dies with no Python
exception does not: SIGKILL (the OOM killer, a scheduler's kill after its grace time), a
segfault in a native extension, ``os.abort()`` from a failed C++ assertion. The lock
file stays behind. The job is restarted, rank 0 reaches its first export, waits for a
lock that nobody holds, and waits forever, outside every collective: no process-group
timeout ends it, and its peer sits in the next gradient all-reduce. The public cases:
modelscope/modelscope#1778 (file-existence locks in the hub cache left by killed CI
jobs: "subsequent test runs ... hang forever waiting to acquire the lock"),
ChrisCummins/clgen#116, and py-filelock's ``SoftFileLock``, whose documentation warns
of the same.

What exposes it: a crash inside ``torch.save``, then a restart. The default search's
probes put one there first (``restarts 1`` and ``crash@torch.save rank=0``: a kill that
leaves no Python exception; the search also draws SIGSEGV and SIGABRT, the native
deaths, which leave the same lock). The restarted run hangs: rank 0 waits in the lock's
poll, with no deadline, outside torch.distributed.

    chaoslight fuzz examples/catalogue/stale_lock_file.py:train_buggy

The fixed twin holds a kernel lock instead (``fcntl.flock`` on the lock file, what
py-filelock's ``FileLock`` does): the kernel releases it when the process dies, however
it dies, so the restarted job takes it at once. A soft lock needs a deadline or a check
that its holder is alive (clgen's fix).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from _catalogue_common import Regressor, dataset, pl, seeded
from torch.utils.data import DataLoader

EXPORT = "export.pt"
LOCK = EXPORT + ".lock"
POLL_SECONDS = 0.05


@contextmanager
def file_exists_lock(path: str) -> Iterator[None]:
    """The lock is the file's existence: removed by ``finally``, never by a dead process."""
    while True:
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            break
        except FileExistsError:
            time.sleep(POLL_SECONDS)  # the bug: a holder that died never removes it
    try:
        yield
    finally:
        os.remove(path)


@contextmanager
def kernel_lock(path: str) -> Iterator[None]:
    """An advisory lock the kernel drops when the holder's process ends, however it ends."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class ExportWeights(pl.Callback):
    """Rank 0 exports the weights at every epoch end, under a lock readers also take."""

    def __init__(self, lock: Any) -> None:
        self.lock = lock

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        if trainer.is_global_zero:
            with self.lock(LOCK):
                torch.save(module.state_dict(), EXPORT)


def _run(lock: Any) -> float:
    fit = seeded(max_epochs=3, callbacks=[ExportWeights(lock)])
    model = Regressor()
    fit.fit(model, DataLoader(dataset(32), batch_size=4))
    return float(model.layer.weight.sum())


def train_buggy() -> float:
    """Bug: a lock that is a file's existence outlives a rank killed while holding it."""
    return _run(file_exists_lock)


def train_fixed() -> float:
    """Fixed: a kernel lock (``fcntl.flock``), released when its holder dies."""
    return _run(kernel_lock)
