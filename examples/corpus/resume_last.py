"""A job that resumes from its last checkpoint after a restart.

Pattern: a preemptible job. Each epoch end it saves what it needs to continue; when it
is started again in the same directory it resumes from what it saved, or starts fresh
when there is nothing yet.

Correct (``train``): ``ModelCheckpoint(save_last=True)`` and ``fit(ckpt_path="last")``.
Lightning serialises the checkpoint in memory and commits the file in one step (an
fsspec transaction: write a temporary file, then rename), so ``last.ckpt`` is either the
previous complete checkpoint or the new complete one, never half of one; "last" resumes
weights, optimizer, epoch and callbacks, or starts fresh (with a warning) when there is
no checkpoint yet. A crash anywhere, even inside the write, leaves a restartable job.

Bug (``train_buggy``): a hand-rolled side checkpoint: rank 0 writes the weights with
``open(path, "wb")`` + ``torch.save`` straight to the final path each epoch, and the job
warm-starts from that file whenever it exists. A crash in the middle of the write leaves
a truncated file under the final name, and every restart then dies in ``torch.load``
("PytorchStreamReader failed reading zip archive"): the job can never come back.

Revealed by a crash inside the second ``torch.save`` on rank 0 and a restart, which is
what ``examples/corpus/_restart.py``'s ``RestartAfterCrash(site="torch.save", rank=0,
nth=2)`` check does (schedule: empty). The crash itself, as a schedule, is

    crash@torch.save rank=0 nth=2

Target: examples/corpus/resume_last.py:train (correct), :train_buggy (bug)
"""

from __future__ import annotations

import os
from typing import Any

import torch
from _corpus_common import Regressor, dataset, pl, trainer
from torch.utils.data import DataLoader

try:
    from lightning.pytorch.callbacks import ModelCheckpoint
except ImportError:
    from pytorch_lightning.callbacks import ModelCheckpoint  # type: ignore[no-redef]

WEIGHTS = "weights.pt"


class SaveWeights(pl.Callback):
    """Rank 0 writes the weights in place at every epoch end (the bug)."""

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        if trainer.is_global_zero:
            with open(WEIGHTS, "wb") as handle:
                torch.save(module.state_dict(), handle)


def _run(hand_rolled: bool) -> int:
    pl.seed_everything(0, verbose=False)
    model = Regressor()
    loader = DataLoader(dataset(32), batch_size=4)
    if hand_rolled:
        if os.path.exists(WEIGHTS):
            model.load_state_dict(torch.load(WEIGHTS))
        fit = trainer(max_epochs=3, callbacks=[SaveWeights()])
        fit.fit(model, loader)
    else:
        last = ModelCheckpoint(dirpath="checkpoints", save_last=True)
        fit = trainer(max_epochs=3, enable_checkpointing=True, callbacks=[last])
        fit.fit(model, loader, ckpt_path="last")
    return fit.global_step


def train() -> int:
    """Correct: Lightning's atomic last.ckpt, resumed with ckpt_path="last"."""
    return _run(hand_rolled=False)


def train_buggy() -> int:
    """Bug: a side checkpoint written in place and warm-started from when present."""
    return _run(hand_rolled=True)
