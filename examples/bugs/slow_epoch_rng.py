"""A rank-0 debugging callback that draws from the global RNG when an epoch is slow.

The program trains with LayerDrop: each residual block is skipped with probability 0.3,
decided per batch by ``torch.rand`` from the global RNG. ``seed_everything(0)`` seeds every
rank alike, so every rank draws the same decisions and trains the same sub-network (DDP
with ``find_unused_parameters=True`` averages the gradients of the blocks every rank ran).

The bug: a ``SlowEpochSample`` callback, on rank 0 only, prints a random training sample
after any epoch that took longer than 0.4 s, picking it with ``torch.randint`` from the
*global* RNG. On a quiet machine no epoch is that slow and nothing happens. When one is (a
straggler, a slow disk, a busy node), rank 0's random stream moves one draw ahead of the
other ranks' for the rest of the run: from then on the ranks disagree on which blocks to
drop. A block dropped on rank 0 but run on rank 1 gets half its gradient (DDP averages
rank 1's with rank 0's zeros); replicas stay in sync and the loss looks fine, so nothing
fails. The run silently trains a different model than the same seed on a quiet machine,
and no two runs are alike.

In production: "we cannot reproduce last week's run with the same seed", a LayerDrop or
stochastic-depth rate that is effectively lower than configured, only on busy clusters.

The fix (``train_fixed``): the callback draws from its own ``torch.Generator``; the
global stream stays the same on every rank whatever the timing.

Found by ``learned-invariants`` under a straggler of 0.5 s or more in an epoch (on either
rank: rank 0 waits for a slow peer in the gradient all-reduce), e.g.
``delay@lightning.training_step rank=1 step=2 seconds=0.5``: the torch RNG state, equal
across ranks at every step of the fault-free runs, differs from the next epoch on.
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
    from lightning.pytorch.strategies import DDPStrategy
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]
    from pytorch_lightning.strategies import DDPStrategy  # type: ignore[assignment]

SLOW_S = 0.4  # an epoch slower than this is worth a look (a quiet one takes ~0.05 s)


class LayerDropNet(pl.LightningModule):
    """Residual blocks, each dropped per batch with probability ``drop`` while training."""

    def __init__(self, drop: float = 0.3) -> None:
        super().__init__()
        self.drop = drop
        self.inp = torch.nn.Linear(8, 16)
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(3))
        self.out = torch.nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inp(x))
        for block in self.blocks:
            # The same seed on every rank: every rank draws the same decision.
            if self.training and float(torch.rand(())) < self.drop:
                continue
            h = h + torch.relu(block(h))
        return self.out(h)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self(x), y)
        self.log("loss", loss, sync_dist=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


class SlowEpochSample(pl.Callback):
    """On rank 0, after an epoch slower than ``SLOW_S``, show one random training sample
    (unusual inputs are a usual suspect for a slow epoch)."""

    def __init__(self, own_generator: bool) -> None:
        self.generator = torch.Generator().manual_seed(0) if own_generator else None
        self.started = 0.0

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        self.started = time.monotonic()

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        if not trainer.is_global_zero or time.monotonic() - self.started < SLOW_S:
            return
        dataset = trainer.train_dataloader.dataset
        # Bug when generator is None: a draw from the global RNG, on rank 0 only.
        index = int(torch.randint(len(dataset), (), generator=self.generator))
        print(f"slow epoch {trainer.current_epoch}: sample {index} = {dataset[index]}")


def _data() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=generator)
    return TensorDataset(x, x[:, :1] - x[:, 1:2] + 0.1 * torch.randn(64, 1, generator=generator))


def _run(own_generator: bool) -> float:
    pl.seed_everything(0, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy=DDPStrategy(find_unused_parameters=True) if devices > 1 else "auto",
        max_epochs=3,
        callbacks=[SlowEpochSample(own_generator)],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = LayerDropNet()
    trainer.fit(model, DataLoader(_data(), batch_size=8, shuffle=True))
    return float(trainer.callback_metrics["loss"])


def train_buggy() -> float:
    """Bug: the slow-epoch sample is drawn from the global RNG, on rank 0 only."""
    return _run(own_generator=False)


def train_fixed() -> float:
    """Fixed: the callback draws from its own generator."""
    return _run(own_generator=True)
