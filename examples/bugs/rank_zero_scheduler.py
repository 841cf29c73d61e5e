"""An LR scheduler stepped inside a ``@rank_zero_only`` logging hook: only rank 0 decays.

The bug: with manual optimization the user steps the LR scheduler themselves. They do it
in a small "log the learning rate, then advance the schedule" helper at the end of each
epoch, and the helper is decorated with ``@rank_zero_only`` because it prints. Rank 0's
learning rate decays every epoch; rank 1 keeps the initial rate. The gradients are still
averaged by DDP, but each rank applies them with its own rate, so the replicas drift
apart from the first step of epoch 1 on.

In production: nothing crashes. The checkpoint (rank 0's weights) and the model the
other ranks evaluate differ; validation metrics synced across ranks mix several models;
a resumed job (every rank loads rank 0's weights) trains differently from the original.

The fix (``train_fixed``): step the scheduler on every rank; keep only the print under
``rank_zero_only``.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
    from lightning.pytorch.utilities import rank_zero_only
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]
    from pytorch_lightning.utilities import rank_zero_only  # type: ignore[no-redef]


class Regressor(pl.LightningModule):
    """A one-layer regressor with manual optimization and a step-decay LR schedule."""

    def __init__(self, every_rank: bool) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.every_rank = every_rank
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        opt = self.optimizers()
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        opt.zero_grad()  # type: ignore[union-attr]
        self.manual_backward(loss)
        opt.step()  # type: ignore[union-attr]

    def on_train_epoch_end(self) -> None:
        if self.every_rank:
            self.lr_schedulers().step()  # type: ignore[union-attr]
            self._report_lr()
        else:
            self._report_and_step()

    @rank_zero_only
    def _report_lr(self) -> None:
        print(f"epoch {self.current_epoch}: lr {self.lr_schedulers().get_last_lr()[0]:.4f}")  # type: ignore[union-attr]

    @rank_zero_only
    def _report_and_step(self) -> None:
        scheduler = self.lr_schedulers()
        print(f"epoch {self.current_epoch}: lr {scheduler.get_last_lr()[0]:.4f}")  # type: ignore[union-attr]
        scheduler.step()  # type: ignore[union-attr]  # the bug: rank 0 only

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        return [optimizer], [scheduler]


def _run(every_rank: bool) -> float:
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=generator)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Regressor(every_rank)
    trainer.fit(model, DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4))
    return float(model.layer.weight.sum())


def train_buggy() -> float:
    """Bug: the scheduler is stepped inside a ``rank_zero_only`` helper."""
    return _run(every_rank=False)


def train_fixed() -> float:
    """Fixed: every rank steps its scheduler; only the print is rank-zero-only."""
    return _run(every_rank=True)
