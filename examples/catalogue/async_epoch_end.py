"""Work in an epoch-end hook racing with asynchronous work: a barrier that waits for the
ranks, not for the work.

Failure mode: at the end of every epoch rank 0 exports the weights (``teacher.pt``) in a
background thread, so the export does not stall training (the idea behind asynchronous
checkpointing, e.g. Lightning's ``AsyncCheckpointIO``), and every rank then waits at
``trainer.strategy.barrier()``, "so that the export is there for everyone". The next
epoch's validation loads the export as a teacher and logs how much the model gained on
it. But the barrier orders the *ranks*, not rank 0's *thread*: it only promises that rank
0 has *started* the export. The ordering assumption ("the export takes milliseconds, an
epoch of training takes longer") holds on a quiet machine; a slow disk or a busy file
system makes the export outlive the epoch, and the readers find no file, or last epoch's.
An error in the thread (a full disk) is never seen by anyone: nobody asks the thread's
future for its result.

In production: a rare ``FileNotFoundError`` or a stale-teacher error on a busy cluster;
or, without the epoch check below, a silent comparison against the wrong model.

What exposes it: a straggler *in the thread*, at its ``torch.save`` (a delay of 0.3 s or
more at ``torch.save`` on rank 0 at the last step of epoch 0 outlasts the next epoch's
training), or the default probes' full disk at ``torch.save``, which the buggy twin
swallows in the thread. chaoslight's sites work in any thread, and the oracle flags a
run that fails under a benign delay, or whose injected error did not end its rank.

    chaoslight fuzz examples/catalogue/async_epoch_end.py:train_buggy

On a GPU the same shape appears with work on a side CUDA stream (an asynchronous copy of
the weights for an EMA or a checkpoint) consumed after a ``dist.barrier`` but without
``stream.synchronize()``; ``drop_sync@cuda.synchronize`` tests a job's reliance on a sync.

The fixed twin waits for the export (``future.result()``, which also re-raises its error
on rank 0's main thread) *before* the barrier.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
from _catalogue_common import Regressor, dataset, seeded
from torch.utils.data import DataLoader

EXPORT = "teacher.pt"


class ExportingRegressor(Regressor):
    """Exports its weights at each epoch's end (rank 0, in a thread); validation compares
    the model with the previous epoch's export."""

    def __init__(self, wait_for_export: bool) -> None:
        super().__init__()
        self.wait_for_export = wait_for_export
        self.executor = ThreadPoolExecutor(max_workers=1)
        self.pending: Future[None] | None = None

    def on_train_epoch_end(self) -> None:
        if self.trainer.is_global_zero:
            state = {k: v.detach().clone() for k, v in self.state_dict().items()}
            self.pending = self.executor.submit(export, state, self.current_epoch)
            if self.wait_for_export:
                self.pending.result()  # the fix: the work is done (or its error raised)
        self.trainer.strategy.barrier("teacher exported")

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        if self.current_epoch == 0:
            return
        teacher = load_teacher(self.current_epoch - 1)
        x, y = batch
        loss = torch.nn.functional.mse_loss(self(x), y)
        old = torch.nn.functional.mse_loss(x @ teacher["layer.weight"].T + teacher["layer.bias"], y)
        self.log("val_gain", old - loss, sync_dist=True)

    def on_fit_end(self) -> None:
        self.executor.shutdown(wait=True)


def export(state: dict[str, torch.Tensor], epoch: int) -> None:
    """Write the export atomically (a reader sees the old file or the new one)."""
    torch.save({"epoch": epoch, **state}, EXPORT + ".tmp")
    os.replace(EXPORT + ".tmp", EXPORT)


def load_teacher(epoch: int) -> dict[str, Any]:
    teacher = torch.load(EXPORT)
    if teacher["epoch"] != epoch:
        raise RuntimeError(f"{EXPORT} is from epoch {teacher['epoch']}, expected {epoch}")
    return teacher


def _run(wait_for_export: bool) -> None:
    fit = seeded(max_epochs=3)
    model = ExportingRegressor(wait_for_export)
    fit.fit(
        model, DataLoader(dataset(32), batch_size=4), DataLoader(dataset(16, seed=1), batch_size=4)
    )


def train_buggy() -> None:
    """Bug: the barrier runs while rank 0's export thread may still be writing."""
    _run(wait_for_export=False)


def train_fixed() -> None:
    """Fixed: rank 0 waits for its export before the barrier."""
    _run(wait_for_export=True)
