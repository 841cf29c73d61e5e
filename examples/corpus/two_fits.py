"""Two ``fit`` calls in one process: pretrain, then fine-tune with a new Trainer.

Pattern: a job that pretrains on one dataset and fine-tunes on another. State that the
first fit leaves on the module (here the fine-tuning learning rate, a tenth of where
pretraining ended, set by a callback in ``on_fit_end``) feeds the second fit's
``configure_optimizers``. The device count is read once: Lightning's teardown removes
``WORLD_SIZE`` after the first fit.

Correct (``train``): the callback sets ``module.lr`` on every rank (only its printout is
limited to rank 0), so both ranks build the same optimizer for the second fit and the
replicas stay equal through it.

Bug (``train_buggy``): the callback's hook is ``@rank_zero_only`` (it "only prints a
summary"), so it also sets the new rate on rank 0 only. DDP broadcasts the *weights*
from rank 0 when the second fit wraps the model, but not the optimizer's settings: rank
1 fine-tunes with ten times the rate, the replicas drift apart from the first fine-tune
step, and nothing crashes.

Revealed with no fault by ``ReplicasInSync`` (schedule: empty). The fine-tune runs more
steps than the pretraining: ``ReplicasInSync`` compares ranks by step number and both
fits count from step 0.

Target: examples/corpus/two_fits.py:train (correct), :train_buggy (bug)
"""

from __future__ import annotations

from typing import Any

import torch
from _corpus_common import Regressor, dataset, pl, trainer, world_size
from torch.utils.data import DataLoader

try:
    from lightning.pytorch.utilities import rank_zero_only
except ImportError:
    from pytorch_lightning.utilities import rank_zero_only  # type: ignore[no-redef]


class FineTuneRate(pl.Callback):
    """At the end of pretraining: fine-tune at a tenth of the final rate."""

    def on_fit_end(self, trainer: Any, module: Any) -> None:
        module.lr = trainer.optimizers[0].param_groups[0]["lr"] / 10
        if trainer.is_global_zero:
            print(f"pretraining done at step {trainer.global_step}; fine-tune lr {module.lr}")


class RankZeroFineTuneRate(pl.Callback):
    @rank_zero_only
    def on_fit_end(self, trainer: Any, module: Any) -> None:
        module.lr = trainer.optimizers[0].param_groups[0]["lr"] / 10
        print(f"pretraining done at step {trainer.global_step}; fine-tune lr {module.lr}")


def _run(callback: pl.Callback) -> float:
    pl.seed_everything(0, verbose=False)
    devices = world_size()  # before the first fit: its teardown deletes WORLD_SIZE
    model = Regressor(lr=0.05)
    pretrain = trainer(devices, max_steps=3, callbacks=[callback])
    pretrain.fit(model, DataLoader(dataset(64, seed=0), batch_size=4))
    finetune = trainer(devices, max_steps=6)
    finetune.fit(model, DataLoader(dataset(64, seed=1), batch_size=4))
    return float(torch.cat([p.detach().reshape(-1) for p in model.parameters()]).sum())


def train() -> float:
    """Correct: the fine-tuning rate is set on every rank."""
    return _run(FineTuneRate())


def train_buggy() -> float:
    """Bug: the fine-tuning rate is set on rank 0 only."""
    return _run(RankZeroFineTuneRate())
