"""A side file written by rank 0 at epoch end and read by every rank the next epoch.

Pattern: a callback keeps a small piece of state outside Lightning's checkpoint, in a
file in the (shared) working directory: at the end of each epoch rank 0 writes the
learning rate for the next epoch (halved every epoch) to ``schedule.json``; at the start
of the next epoch every rank reads it and sets its optimizer's rate.

Correct (``train``): rank 0 writes to a temporary file and ``os.replace``s it over the
final name (readers see the old file or the new one, never half of one), then *every*
rank waits at ``trainer.strategy.barrier()``. No rank can start the next epoch before
the file is complete, whatever rank 0's speed; each reader checks that the file is the
one for the epoch just ended. All ranks set the same rate, so the replicas stay equal.

Bug (``train_buggy``): rank 0 writes the final file in place (two writes, no rename) and
nobody waits. Rank 1 races ahead into the next epoch's ``on_train_epoch_start`` and reads
whatever is there: no file yet, half a file, or last epoch's. What a user sees:
``FileNotFoundError`` (or a JSON error, or a stale epoch) on rank 1, and rank 0 released
from its next collective.

Rank 0 does its own epoch-end work before it writes (``rank_zero_work``: an evaluation,
an upload; a 0.1 s stand-in here), so rank 1 normally wins the race and the buggy twin
fails with no fault (without that work it fails in about 6 runs of 10, all three ways).
A straggler at the writer's hook makes it certain (epoch 0 ends after step 3):

    delay@lightning.on_train_epoch_end rank=0 step=3 seconds=0.5

Target: examples/corpus/atomic_checkpoint.py:train (correct), :train_buggy (bug)
"""

from __future__ import annotations

import json
import time
from typing import Any

from _corpus_common import Regressor, dataset, pl, trainer, write_atomically
from torch.utils.data import DataLoader

SIDE_FILE = "schedule.json"


def rank_zero_work() -> None:
    """Stands for what rank 0 does at epoch end before it writes (evaluate, upload, log)."""
    time.sleep(0.1)


class SideFileSchedule(pl.Callback):
    def __init__(self, atomic: bool) -> None:
        self.atomic = atomic

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        if trainer.is_global_zero:
            rank_zero_work()
            lr = trainer.optimizers[0].param_groups[0]["lr"] / 2
            text = json.dumps({"epoch": trainer.current_epoch, "lr": lr})
            if self.atomic:
                write_atomically(SIDE_FILE, text)
            else:
                with open(SIDE_FILE, "w") as handle:
                    handle.write(text[: len(text) // 2])
                    handle.flush()
                    handle.write(text[len(text) // 2 :])
        if self.atomic:
            trainer.strategy.barrier("side file written")

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        if trainer.current_epoch == 0:
            return
        with open(SIDE_FILE) as handle:
            state = json.load(handle)
        if state["epoch"] != trainer.current_epoch - 1:
            raise RuntimeError(f"{SIDE_FILE} is from epoch {state['epoch']}: stale")
        for group in trainer.optimizers[0].param_groups:
            group["lr"] = state["lr"]


def _run(atomic: bool) -> None:
    pl.seed_everything(0, verbose=False)
    fit = trainer(max_epochs=3, callbacks=[SideFileSchedule(atomic)])
    fit.fit(Regressor(), DataLoader(dataset(32), batch_size=4))


def train() -> None:
    """Correct: atomic write by rank 0, then a barrier on every rank."""
    _run(atomic=True)


def train_buggy() -> None:
    """Bug: an in-place write and no barrier: readers race the writer."""
    _run(atomic=False)
