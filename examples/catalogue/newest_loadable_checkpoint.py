"""A restarted job that resumes from "the newest checkpoint this rank can read".

Failure mode: a job checkpoints at every epoch end (``ModelCheckpoint``, every epoch
kept) and is restarted by its scheduler after a crash. "A corrupted checkpoint must not
stop the restart", so each rank walks the checkpoints newest first and resumes from the
first one it can load, falling back to an older one (or to a fresh start) when a load
fails. Whether a load fails is the rank's own experience: a truncated or empty file seen
through one node's cache, a flaky read of shared storage, a file being replaced under
it. When one rank falls back, the ranks resume at different steps and plan different
numbers of batches in collectives that must pair up: the restarted job hangs (or trains
replicas from different epochs). The failure comes *during recovery*: the first run was
fine until its crash. Public cases: KempnerForge#177's second defect (an auto-resume that
picks a checkpoint with no durability check, and dies in it) and allenai/allennlp#2129
("recover from the previous checkpoint instead of the latest one").

What exposes it: faults bound to the restarted run. The default search's resume probe
crashes rank 0 at the step after the first checkpoint, restarts the job, and fails the
checkpoint read on rank 1 in the second run (``run=2``); ``bad_checkpoint`` (a truncated,
empty or missing file at ``torch.load`` or Lightning's checkpoint loading), bound to
``run=2``, does the same. The restarted run hangs.

    chaoslight fuzz examples/catalogue/newest_loadable_checkpoint.py:train_buggy

The fixed twin decides the resume from what every rank sees the same way (the newest
checkpoint by name, on shared storage) and lets a failed load end the job: every rank
fails cleanly, and the next restart, or a person, decides. A job that must fall back has
the ranks agree on it first (``examples/restart/resume_fallback.py``).
"""

from __future__ import annotations

import glob
import os
import pickle
from collections.abc import Callable

import torch
from _catalogue_common import Regressor, dataset, pl, seeded
from torch.utils.data import DataLoader

CHECKPOINTS = "checkpoints"
UNREADABLE = (OSError, RuntimeError, EOFError, pickle.UnpicklingError)


def newest_first() -> list[str]:
    paths = glob.glob(os.path.join(CHECKPOINTS, "epoch=*.ckpt"))
    return sorted(paths, key=epoch_of, reverse=True)


def epoch_of(path: str) -> int:
    return int(os.path.basename(path)[len("epoch=") : -len(".ckpt")])


def newest_this_rank_can_load() -> str | None:
    """The bug: each rank tries the checkpoints itself and falls back on its own."""
    for path in newest_first():
        try:
            torch.load(path, map_location="cpu", weights_only=False)
        except UNREADABLE:
            continue  # an older checkpoint, or none: on this rank alone
        return path
    return None


def newest_by_name() -> str | None:
    """Fixed: the same choice on every rank; a load that fails raises."""
    paths = newest_first()
    return paths[0] if paths else None


def _run(choose: Callable[[], str | None]) -> float:
    every_epoch = pl.callbacks.ModelCheckpoint(
        dirpath=CHECKPOINTS, filename="{epoch}", save_top_k=-1, every_n_epochs=1
    )
    fit = seeded(max_epochs=3, enable_checkpointing=True, callbacks=[every_epoch])
    model = Regressor()
    resume = choose()
    fit.fit(model, DataLoader(dataset(32), batch_size=4), ckpt_path=resume)
    return float(model.layer.weight.sum())


def train_buggy() -> float:
    """Bug: a rank that cannot read the newest checkpoint resumes from an older one."""
    return _run(newest_this_rank_can_load)


def train_fixed() -> float:
    """Fixed: every rank resumes from the same checkpoint, or the job fails."""
    return _run(newest_by_name)
