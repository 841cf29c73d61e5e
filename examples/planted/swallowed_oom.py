"""Planted bug: an OOM swallowed on the rank where it happens.

The model catches ``torch.OutOfMemoryError`` around its forward pass and skips the step
on that rank alone by returning ``None``. Under DDP the other ranks go on to the gradient
all-reduce; Lightning refuses a skipped step under DDP, so the rank that swallowed the
OOM fails later with an unrelated error and the real cause is lost. The minimal failing
schedule is one fault:

    oom@lightning.forward rank=0 step=0

    chaoslight fuzz examples/planted/swallowed_oom.py:train
    chaoslight fuzz examples/planted/swallowed_oom.py:train_fixed

``train_fixed`` lets the error propagate: the run fails promptly and visibly, with the
OOM named on the rank where it happened.
"""

from __future__ import annotations

from typing import Any

import torch
from _common import fit

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl  # type: ignore[no-redef]


class Model(pl.LightningModule):
    def __init__(self, swallow: bool) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.swallow = swallow

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor | None:
        x, y = batch
        try:
            prediction = self(x)
        except torch.OutOfMemoryError:
            if not self.swallow:
                raise
            return None  # the bug: skip the step on this rank alone
        return torch.nn.functional.mse_loss(prediction, y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(swallow: bool) -> None:
    fit(Model(swallow))


def train() -> None:
    """The buggy program."""
    _fit(swallow=True)


def train_fixed() -> None:
    """The fixed twin: the OOM propagates."""
    _fit(swallow=False)
