"""Preemption done right for the ranks, wrong for their DataLoader workers.

Failure mode: the job handles preemption the way ``preemption.py``'s fixed twin does:
once Lightning has installed its handler, a callback replaces it with one that only sets
a flag; at every batch start the ranks MAX-reduce the flag, and if any rank was
signalled every rank saves ``preempted.ckpt`` at the same batch and stops, and the job
exits 143 so that the scheduler requeues it and the next run resumes from the snapshot.
The data is decoded by DataLoader worker processes (``num_workers=2``). A scheduler does
not signal only the rank: SLURM signals every process of the job step, and a container
runtime signals the process group. The SIGTERM reaches the workers, which die of it
(torch's workers keep SIGTERM's default action), and the rank fails fetching its next
batch, ``DataLoader worker (pid ...) is killed by signal: Terminated``, before the batch
start where it would have saved: no snapshot, and the requeued job starts over. With
``num_workers=0`` the same drill is clean, which is what hides it in testing. The public
case: KempnerInstitute/KempnerForge#177 (fixed by KempnerForge#203).

What exposes it: ``preempt ... group=true``, SIGTERM to a rank's whole process group
(its DataLoader workers too), which the default search draws. The verdict says the
SIGTERM reached the ranks and rank 0 did not stop cleanly: its DataLoader worker was
killed by the signal.

    chaoslight fuzz examples/catalogue/preemption_workers.py:train_buggy

The fixed twin's workers ignore SIGTERM (``worker_init_fn``): the rank decides when the
data stops, the step in progress finishes and the snapshot is saved at the next batch
start; the loader still stops its workers itself when the fit ends. Under Lightning's own
SIGTERM handling every program with worker processes fails this way: chaoslight reports
that apart, as the known issue ``lightning-sigterm-dataloader-workers``.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import torch
import torch.distributed as dist
from _catalogue_common import Regressor, dataset, pl, seeded
from torch.utils.data import DataLoader

SNAPSHOT = "preempted.ckpt"
EXIT_ON_SIGTERM = 128 + signal.SIGTERM  # what a shell reports for a SIGTERM'd process
WORKERS = 2


class AgreedStop(pl.Callback):
    """Stops every rank at the same batch start when any rank was sent SIGTERM."""

    def __init__(self) -> None:
        self.signalled = False
        self.preempted = False

    def on_train_start(self, trainer: Any, module: Any) -> None:
        # Lightning installed its handler before this hook; it restores it when fit ends.
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.signalled = True  # only a flag: no collective, no I/O in a signal handler

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        flag = torch.tensor([1.0 if self.signalled else 0.0])
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item() > 0 and not self.preempted:
            self.preempted = True
            trainer.save_checkpoint(SNAPSHOT)  # every rank: it ends in a barrier
            trainer.should_stop = True


def ignore_sigterm(worker_id: int) -> None:
    """A worker ignores the scheduler's SIGTERM: its rank decides when the data stops."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _run(worker_init_fn: Any) -> None:
    stop = AgreedStop()
    fit = seeded(max_epochs=2, callbacks=[stop])
    loader = DataLoader(
        dataset(32), batch_size=4, num_workers=WORKERS, worker_init_fn=worker_init_fn
    )
    resume = SNAPSHOT if os.path.exists(SNAPSHOT) else None  # a requeued job resumes
    fit.fit(Regressor(), loader, ckpt_path=resume)
    if stop.preempted:
        sys.exit(EXIT_ON_SIGTERM)  # stopped early: the scheduler must requeue the job


def train_buggy() -> None:
    """Bug: the workers keep SIGTERM's default action and die before the agreed stop."""
    _run(worker_init_fn=None)


def train_fixed() -> None:
    """Fixed: the workers ignore SIGTERM, so the agreed stop saves the snapshot."""
    _run(worker_init_fn=ignore_sigterm)
