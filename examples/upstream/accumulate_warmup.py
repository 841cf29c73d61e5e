"""Gradient accumulation with a per-step warm-up schedule, as Lightning's docs on
``accumulate_grad_batches`` and on ``configure_optimizers``'s scheduler dict show it.

Shape: ``accumulate_grad_batches=4`` over 7 batches an epoch (a short last group, which
Lightning steps at the epoch end), ``gradient_clip_val=1.0`` with
``gradient_clip_algorithm="norm"``; ``AdamW`` with weight decay on the weights but not on
biases and norms (two parameter groups); a ``LambdaLR`` linear warm-up then decay,
returned as ``{"scheduler": ..., "interval": "step", "frequency": 1}`` (stepped per
optimizer step, not per batch); ``LayerNorm`` in the model; the current rate logged with
``self.log("lr", ...)`` from ``self.lr_schedulers()``.

Why it is correct: every rank runs the same number of batches (Lightning's
``DistributedSampler`` pads), so every rank accumulates the same groups and steps
together; DDP skips the all-reduce on accumulating batches (``no_sync``) and reduces the
summed gradient at each group's last batch on every rank; the schedule counts optimizer
steps, which are the same everywhere.
"""

from __future__ import annotations

from typing import Any

import torch
from _upstream_common import pl, quiet_trainer
from torch.utils.data import DataLoader, TensorDataset

WARMUP, TOTAL = 2, 8


def regression(n: int = 112) -> TensorDataset:
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(n, 6, generator=generator)
    noise = 0.05 * torch.randn(n, 1, generator=generator)
    y = torch.tanh(x[:, :3].sum(dim=1, keepdim=True)) + noise
    return TensorDataset(x, y)


def warmup_then_decay(step: int) -> float:
    if step < WARMUP:
        return (step + 1) / WARMUP
    return max(0.1, (TOTAL - step) / (TOTAL - WARMUP))


class Regressor(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(6, 16), torch.nn.LayerNorm(16), torch.nn.GELU(), torch.nn.Linear(16, 1)
        )

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, prog_bar=True)
        self.log("lr", self.lr_schedulers().get_last_lr()[0])
        return loss

    def configure_optimizers(self) -> Any:
        decay = [p for n, p in self.named_parameters() if p.ndim > 1]
        no_decay = [p for n, p in self.named_parameters() if p.ndim <= 1]
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
            lr=0.01,
        )
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_then_decay)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1},
        }


def train() -> int:
    """Fit two epochs of 7 batches, accumulating 4; the optimizer steps taken."""
    pl.seed_everything(0, verbose=False)
    trainer = quiet_trainer(
        max_epochs=2,
        accumulate_grad_batches=4,
        gradient_clip_val=1.0,
        gradient_clip_algorithm="norm",
        enable_checkpointing=False,
    )
    trainer.fit(Regressor(), DataLoader(regression(), batch_size=8, shuffle=True))
    return trainer.global_step


if __name__ == "__main__":
    train()
