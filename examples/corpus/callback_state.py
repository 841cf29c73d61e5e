"""A callback whose state drives training, saved in (or left out of) the checkpoint.

Pattern: a stateful callback. ``StepDecay`` counts optimizer steps and sets the learning
rate from the count (halved every ``EVERY`` steps), so a resumed run needs the count
back. ``ModelCheckpoint(save_last=True)`` writes ``last.ckpt`` at every epoch end; a
preempted job is restarted with that checkpoint.

Correct (``train``): the callback has ``state_dict``/``load_state_dict``, so Lightning
saves the count in every checkpoint and restores it on resume: a run crashed at an epoch
boundary and restarted from ``last.ckpt`` continues the same learning-rate schedule and
ends with bitwise the same weights as an uninterrupted run.

Bug (``train_buggy``): the same callback without ``state_dict``/``load_state_dict``.
Nothing is wrong until a restart: then the count starts again at 0, the learning rate
jumps back up, and the resumed run ends with other weights. No error, no warning.

Revealed with no fault by ``ResumeEquivalence`` (which crashes every rank at the first
batch of the second epoch and restarts from ``last.ckpt``): schedule empty, check
``resume-equivalence``.

Target: examples/corpus/callback_state.py:train (correct), :train_buggy (bug)
"""

from __future__ import annotations

from typing import Any

from _corpus_common import Regressor, dataset, pl, trainer
from torch.utils.data import DataLoader

try:
    from lightning.pytorch.callbacks import ModelCheckpoint
except ImportError:
    from pytorch_lightning.callbacks import ModelCheckpoint  # type: ignore[no-redef]

EVERY = 3  # halve the rate every EVERY optimizer steps
BASE_LR = 0.05


class StepDecay(pl.Callback):
    """The learning rate is ``BASE_LR / 2 ** (steps // EVERY)``; ``steps`` is this count."""

    def __init__(self) -> None:
        self.steps = 0

    def on_train_batch_start(self, trainer: Any, module: Any, *args: Any) -> None:
        for group in trainer.optimizers[0].param_groups:
            group["lr"] = BASE_LR / 2 ** (self.steps // EVERY)

    def on_train_batch_end(self, trainer: Any, module: Any, *args: Any) -> None:
        self.steps += 1


class CheckpointedStepDecay(StepDecay):
    def state_dict(self) -> dict[str, Any]:
        return {"steps": self.steps}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.steps = state_dict["steps"]


def _run(decay: StepDecay) -> None:
    pl.seed_everything(0, verbose=False)
    # (save_top_k=0 would write last.ckpt only when training ends, in Lightning 2.6)
    last = ModelCheckpoint(dirpath="checkpoints", save_last=True)
    fit = trainer(max_epochs=3, enable_checkpointing=True, callbacks=[decay, last])
    fit.fit(Regressor(BASE_LR), DataLoader(dataset(32), batch_size=4))


def train() -> None:
    """Correct: the step count is in the checkpoint."""
    _run(CheckpointedStepDecay())


def train_buggy() -> None:
    """Bug: the step count is not saved, so a resumed run restarts the schedule."""
    _run(StepDecay())
