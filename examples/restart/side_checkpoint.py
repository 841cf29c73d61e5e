"""A side checkpoint written in place: a crash mid-write breaks the restart.

Rank 0 keeps a copy of the weights in ``side.pt`` every few steps, and a job that
finds one warm-starts from it. ``train_buggy`` opens the final path for writing
(``open(path, "wb")`` truncates it at once) and then calls ``torch.save``: a crash
inside the save leaves an empty or half-written file, and the restarted job dies
loading it. ``train_fixed`` writes a temporary file and renames it over the final path
(``os.replace`` is atomic): a crash leaves the last good copy in place.

    chaoslight fuzz examples/restart/side_checkpoint.py:train_buggy

The minimal schedule the search finds is a crash in ``torch.save`` on rank 0 followed
by one restart::

    restarts 1
    crash@torch.save rank=0 step=3
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "planted"))
from _common import LinearRegression, quiet_trainer, regression_data

SIDE = Path("side.pt")
EVERY = 2  # steps between side copies
MAX_STEPS = 8


class Model(LinearRegression):
    def __init__(self, atomic: bool) -> None:
        super().__init__()
        self.atomic = atomic

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.trainer.is_global_zero and self.trainer.global_step % EVERY == 0:
            self._save_side_copy()

    def _save_side_copy(self) -> None:
        weights = {k: v.detach().clone() for k, v in self.state_dict().items()}
        if self.atomic:
            temporary = SIDE.with_suffix(".tmp")
            torch.save(weights, temporary)
            os.replace(temporary, SIDE)
        else:
            with open(SIDE, "wb") as handle:  # truncates the last good copy first
                torch.save(weights, handle)


def _train(atomic: bool) -> None:
    trainer = quiet_trainer(max_steps=MAX_STEPS)  # seeds: the model's init is the same
    model = Model(atomic)
    if SIDE.exists():  # a restarted job warm-starts from the side copy
        model.load_state_dict(torch.load(SIDE))
    trainer.fit(model, regression_data(batches=MAX_STEPS))


def train_buggy() -> None:
    _train(atomic=False)


def train_fixed() -> None:
    _train(atomic=True)
