"""Not a known issue: the program's own preemption bug, on a Lightning that has one too.

Shape: a callback saves a "preempted" checkpoint when the job is stopped by SIGTERM, in
``on_exception``, from rank 0 only (``if trainer.is_global_zero:
trainer.save_checkpoint(...)``, the habit of writing files from rank 0).
``trainer.save_checkpoint`` ends in a barrier every rank must join, and the other ranks
have already left ``fit`` with their own ``SIGTERMException``: rank 0 waits for them
forever (on NCCL, until the 30-minute watchdog). Every rank got the notice at the same
step, Lightning's handler stopped them together; the hang is the callback's.

Lightning 2.5.2-2.6.x has its own SIGTERM bug (its handler's ``dist.broadcast``), which
chaoslight reports apart as a known issue. This program shows the line between the two:
``chaoslight fuzz --faults preempt`` reports this hang as the program's failure (exit 1),
not as Lightning's known issue, because no rank waits in Lightning's SIGTERM broadcast::

    chaoslight fuzz examples/known_issues/preemption_own_bug.py:train_buggy --faults preempt
    chaoslight fuzz examples/known_issues/preemption_own_bug.py:train_fixed --faults preempt

``train_fixed`` writes each rank's own snapshot with ``torch.save`` (no collective) and
lets the exception go on, so every rank ends. (A SIGTERM to one rank alone still meets
Lightning's known issue there: reported apart, exit 0; ``--strict`` makes it a failure.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "planted"))
from _common import LinearRegression, pl, quiet_trainer, regression_data

MAX_STEPS = 12


class SaveOnPreemption(pl.Callback):
    """On SIGTERMException, keep what the run got to."""

    def __init__(self, rank_zero_only: bool) -> None:
        self.rank_zero_only = rank_zero_only

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        if type(exception).__name__ != "SIGTERMException":
            return
        if self.rank_zero_only:  # the bug: a collective (save_checkpoint's barrier) on rank 0
            if trainer.is_global_zero:
                trainer.save_checkpoint("preempted.ckpt")
            return
        state = {"step": trainer.global_step, "model": pl_module.state_dict()}
        torch.save(state, f"preempted-rank{trainer.global_rank}.pt")


def _fit(rank_zero_only: bool) -> None:
    trainer = quiet_trainer(max_steps=MAX_STEPS, callbacks=[SaveOnPreemption(rank_zero_only)])
    trainer.fit(LinearRegression(), regression_data(batches=MAX_STEPS))


def train_buggy() -> None:
    """Bug: rank 0 alone calls ``trainer.save_checkpoint`` in ``on_exception``."""
    _fit(rank_zero_only=True)


def train_fixed() -> None:
    """Fixed: each rank ``torch.save``s its own snapshot; no collective on the way out."""
    _fit(rank_zero_only=False)
