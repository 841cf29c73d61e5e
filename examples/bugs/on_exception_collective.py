"""An ``on_exception`` cleanup callback that calls a collective.

The bug: a callback records "how far did we get" when training fails: in ``on_exception``
it all-reduces the number of samples each rank has processed (to log the global count)
and writes a crash report from rank 0. Lightning calls ``on_exception`` only on the rank
that raised; its peers are in the next step's gradient all-reduce or the next hook's
broadcast, so the failing rank's all-reduce pairs with nothing (or with the wrong
collective), and the error that should end the job never surfaces.

In production (NCCL): a CUDA OOM or a data error on one GPU, which should kill the job at
once, becomes a 30-minute hang (the NCCL watchdog); the real error is only in that
rank's log, if the process is ever torn down cleanly.

The fix (``train_fixed``): ``on_exception`` does rank-local work only: each rank writes
its own report file (``crash-rank{N}.txt``) and the exception propagates.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]


class Regressor(pl.LightningModule):
    """A one-layer regressor."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


class CrashReport(pl.Callback):
    """Count samples; on an exception, write a crash report."""

    def __init__(self, global_count: bool) -> None:
        self.global_count = global_count
        self.samples = 0

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        self.samples += len(batch[0])

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        if self.global_count:  # the bug: a collective on the failing rank only
            count = trainer.strategy.reduce(torch.tensor(float(self.samples)), reduce_op="sum")
            if trainer.is_global_zero:
                with open("crash-report.txt", "w") as handle:
                    handle.write(f"{exception!r} after {int(count)} samples\n")
            return
        with open(f"crash-rank{trainer.global_rank}.txt", "w") as handle:
            handle.write(f"{exception!r} after {self.samples} samples on this rank\n")


def _run(global_count: bool) -> float:
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=generator)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=2,
        callbacks=[CrashReport(global_count)],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Regressor()
    trainer.fit(model, DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4))
    return float(model.layer.weight.sum())


def train_buggy() -> float:
    """Bug: ``on_exception`` all-reduces on the failing rank only."""
    return _run(global_count=True)


def train_fixed() -> float:
    """Fixed: ``on_exception`` writes a per-rank report, no collective."""
    return _run(global_count=False)
