"""Planted bug: a collective issued from a hook that only one rank runs.

A callback logs a synced metric at the end of every validation epoch — but only on rank 0
(it is decorated with Lightning's ``rank_zero_only``), so rank 0's all-reduce has no
partner and the ranks desynchronise: no fault is needed, the job hangs on its own.
``train_fixed`` logs from every rank.
"""

from __future__ import annotations

from typing import Any

import torch
from _common import pl, quiet_trainer, regression_data

try:
    from lightning.pytorch.utilities import rank_zero_only
except ImportError:
    from pytorch_lightning.utilities import rank_zero_only  # type: ignore[no-redef]


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class WeightLogger(pl.Callback):
    def __init__(self, every_rank: bool) -> None:
        self.every_rank = every_rank

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        if self.every_rank:
            self._log(module)
        else:
            rank_zero_only(self._log)(module)  # the bug: one rank joins the all-reduce

    def _log(self, module: Any) -> None:
        module.log("weight_norm", module.layer.weight.norm(), sync_dist=True)


def _fit(every_rank: bool) -> None:
    trainer = quiet_trainer(max_epochs=2, callbacks=[WeightLogger(every_rank)])
    trainer.fit(Model(), regression_data(batches=4))


def train() -> None:
    """The buggy program."""
    _fit(every_rank=False)


def train_fixed() -> None:
    """The fixed twin: every rank logs, so every rank joins the all-reduce."""
    _fit(every_rank=True)
