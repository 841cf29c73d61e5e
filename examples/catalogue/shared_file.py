"""A callback that writes one shared file from every rank: no rank guard, no atomic write.

Failure mode: a callback keeps a little state between epochs in a file: at the end of an
epoch it records the epoch's training loss in ``loss.json``, and at the start of the next
it reads the file back and sets the learning rate from it (a hand-rolled, loss-scaled
warm restart). The file is written by *every* rank, in place (``open(..., "w")``), and
the logged loss is each rank's own (``self.log`` without ``sync_dist`` averages over this
rank's batches), so each rank writes a different number to the same path. The ranks
normally read the file only after both have written it: each spends ~0.2 s preparing the
next epoch first (rebuilding augmentation tables; a sleep stands in for it), so both read
the last writer's number and agree. When one rank is a few hundred milliseconds late
at the end of an epoch (a slow disk, a busy host, a GC pause), the other has written,
prepared and *read its own* number before the late rank writes: the two ranks set
different learning rates, and the replicas drift apart from the next step on. A late
write that lands while another rank reads gives the reader half a file instead
(``JSONDecodeError``), and so would two writes of different lengths that overlap (here
the line has a fixed width, so the run without a fault is deterministic).

In production: rare, load-dependent divergence or a JSON error on a busy cluster, never on
a developer's machine; run-to-run differences even when it "works" (which rank's loss
wins is a race).

What exposes it: a straggler at the end of an epoch on one rank. The default search's
probes put a 1 s delay at each step of each user hook that is not per batch, on each
rank (here ``lightning.on_train_epoch_end`` at the last step of epoch 0), and
``replicas-in-sync`` reports the first step where the ranks' weights differ. The shrunk
schedule is one fault: ``delay@lightning.on_train_epoch_end rank=0 step=3 seconds=0.5``
(the shrinker keeps one grid point above the smallest delay that fails, 0.3 s, the first
grid point past the 0.2 s margin).

    chaoslight fuzz examples/catalogue/shared_file.py:train_buggy

The fixed twin writes from rank 0 only, atomically (a temporary file, ``fsync``,
``os.replace``: a reader sees the old file or the new one, never half of one), then every
rank waits at ``trainer.strategy.barrier()`` before anyone reads. See also
``examples/corpus/atomic_checkpoint.py`` (rank 0 writes, no barrier) and
``examples/planted/epoch_race.py``.
"""

from __future__ import annotations

import json
import time
from typing import Any

import torch
from _catalogue_common import Regressor, dataset, pl, seeded, write_atomically
from torch.utils.data import DataLoader

STATE = "loss.json"
BASE_LR = 0.1
PREPARE_SECONDS = 0.2  # each rank's own work at an epoch's start, before it reads


class LoggingRegressor(Regressor):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.log("train_loss", loss, on_step=False, on_epoch=True)  # this rank's mean
        return loss


class LossScaledRestart(pl.Callback):
    """Epoch end: record the training loss in a file; epoch start: set the LR from it."""

    def __init__(self, guarded: bool) -> None:
        self.guarded = guarded

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        loss = float(trainer.callback_metrics["train_loss"])
        # One JSON line of a fixed width (the loss in exponent notation), so two ranks'
        # writes that overlap leave one whole line, not a mix: the race below is the bug.
        line = f'{{"epoch": {trainer.current_epoch}, "loss": {loss:.6e}}}\n'
        if not self.guarded:
            with open(STATE, "w") as handle:  # the bug: every rank, in place, no barrier
                handle.write(line)
            return
        if trainer.is_global_zero:
            write_atomically(STATE, line)
        trainer.strategy.barrier("loss.json written")

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        if trainer.current_epoch == 0:
            return
        time.sleep(PREPARE_SECONDS)  # stands for rebuilding the epoch's augmentation tables
        with open(STATE) as handle:
            state = json.load(handle)
        for group in trainer.optimizers[0].param_groups:
            group["lr"] = BASE_LR * state["loss"] / (1.0 + state["loss"])  # anneal with the loss


def _run(guarded: bool) -> float:
    fit = seeded(max_epochs=3, callbacks=[LossScaledRestart(guarded)])
    fit.fit(LoggingRegressor(lr=BASE_LR), DataLoader(dataset(32), batch_size=4))
    return float(fit.optimizers[0].param_groups[0]["lr"])


def train_buggy() -> float:
    """Bug: every rank writes its own loss to the same file, in place, and nobody waits."""
    return _run(guarded=False)


def train_fixed() -> float:
    """Fixed: rank 0 writes atomically, then a barrier on every rank before the reads."""
    return _run(guarded=True)
