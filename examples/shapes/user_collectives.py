"""The user's own ``torch.distributed`` calls: ``all_reduce`` and ``barrier`` in hooks.

Shape: ``on_train_epoch_end`` sums each rank's count of samples with
``dist.all_reduce`` and checks it against the dataset size; ``on_fit_end`` calls
``dist.barrier()`` before rank 0 writes a summary file that every rank then reads after
a second barrier.

Why it is correct: every rank makes every call, in the same order, at the same points
(epoch end, fit end), with tensors of the same shape; the file is read only after the
barrier that follows its write, and it is written atomically (``os.replace``).
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]

SAMPLES = 32


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.seen = 0
        self.summary = ""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.seen += x.shape[0]
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def on_train_epoch_end(self) -> None:
        seen = torch.tensor([self.seen], dtype=torch.int64)
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(seen)
        assert int(seen) == SAMPLES, f"the ranks saw {int(seen)} samples, not {SAMPLES}"
        self.seen = 0

    def on_fit_end(self) -> None:
        distributed = dist.is_available() and dist.is_initialized()
        if distributed:
            dist.barrier()
        if self.trainer.is_global_zero:
            with open("summary.txt.tmp", "w") as handle:
                handle.write(f"{float(self.layer.weight.sum()):.6f}\n")
            os.replace("summary.txt.tmp", "summary.txt")
        if distributed:
            dist.barrier()
        with open("summary.txt") as handle:
            self.summary = handle.read().strip()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def train() -> str:
    """Fit two epochs with the program's own collectives; return the summary every rank read."""
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, 4, generator=generator)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Model()
    trainer.fit(model, DataLoader(data, batch_size=4, shuffle=True))
    return model.summary


if __name__ == "__main__":
    train()
