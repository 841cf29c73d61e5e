"""BatchNorm running statistics with ``DDPStrategy(broadcast_buffers=False)``.

The bug: the user turned off DDP's buffer broadcast (a speed tip, or copied from a
detection code base that uses frozen BatchNorm) while the model still has a trainable
``BatchNorm1d``. Each rank's running mean and variance are then updated from its own
batches only and never synchronised: the parameters stay equal (gradients are averaged)
but the buffers drift apart, and so do the models' outputs in ``eval()`` mode.

In production: nothing crashes. Validation metrics (evaluated by each rank with its own
statistics, then averaged) do not match the checkpoint (rank 0's statistics) when it is
reloaded; with skewed shards (one rank gets one domain) the saved model is visibly worse
than the logged validation score.

The fix (``train_fixed``): average the BatchNorm statistics across ranks at the end of
every training epoch, before validation and checkpointing (timm's ``distribute_bn``), or
use ``sync_batchnorm=True`` on GPUs (``SyncBatchNorm`` does not run on CPU). Note that
DDP's default, ``broadcast_buffers=True``, copies rank 0's buffers at the start of a
*forward* (one that follows a synced training forward: not the first after a validation
run or ``no_sync`` micro-batches), so right after the last step the ranks' statistics
still differ by that step's update.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
    from lightning.pytorch.strategies import DDPStrategy
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]
    from pytorch_lightning.strategies import DDPStrategy  # type: ignore[assignment]


class Classifier(pl.LightningModule):
    """Linear -> BatchNorm -> ReLU -> Linear; ``synced``: average BN statistics per epoch."""

    def __init__(self, synced: bool) -> None:
        super().__init__()
        self.synced = synced
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 1)
        )

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def on_train_epoch_end(self) -> None:
        if self.synced and self.trainer.world_size > 1:
            for module in self.modules():  # timm's distribute_bn: average the statistics
                if isinstance(module, torch.nn.BatchNorm1d):
                    for buffer in (module.running_mean, module.running_var):
                        torch.distributed.all_reduce(buffer)
                        buffer /= self.trainer.world_size

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _run(synced: bool) -> float:
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=generator)
    x[1::2] += 2.0  # odd samples (rank 1's shard) come from a shifted domain
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    strategy: Any = DDPStrategy(broadcast_buffers=False) if devices > 1 else "auto"
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy=strategy,
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Classifier(synced)
    data = TensorDataset(x, x.sum(1, keepdim=True))
    trainer.fit(model, DataLoader(data, batch_size=4, shuffle=True))
    return float(model.net[1].running_mean.sum())


def train_buggy() -> float:
    """Bug: BatchNorm buffers never synchronised (``broadcast_buffers=False``)."""
    return _run(synced=False)


def train_fixed() -> float:
    """Fixed: the BatchNorm statistics are averaged across ranks at every epoch end."""
    return _run(synced=True)
