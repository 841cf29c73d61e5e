"""A GAN whose discriminator step is skipped on a rank-local condition.

The bug: a common GAN trick, "do not let the discriminator get too strong": after the
discriminator's backward, its optimizer steps only if its loss is above a floor. The
loss compared is this rank's own (its own real batch), so at some step one rank steps
the discriminator and the other does not. The backward still ran on every rank (DDP
averaged the gradients, so nothing hangs), but the discriminator replicas now differ,
and from then on every rank trains a different GAN.

In production: nothing fails; the discriminators drift apart, the synced losses are
averages over different models, and the checkpoint (rank 0's) is not the model whose
metrics were logged. Resuming from it changes the training curve.

The fix (``train_fixed``): decide on the loss averaged across ranks
(``self.trainer.strategy.reduce``), so every rank steps or skips together.
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

D_LOSS_FLOOR = 1.35


class Gan(pl.LightningModule):
    """A tiny GAN on 2-D points; manual optimization, two optimizers."""

    def __init__(self, synced: bool, latent: int = 3) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.synced = synced
        self.latent = latent
        self.generator = torch.nn.Sequential(
            torch.nn.Linear(latent, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)
        )
        self.discriminator = torch.nn.Sequential(
            torch.nn.Linear(2, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)
        )
        self.d_skips = 0

    def training_step(self, batch: Any, batch_idx: int) -> None:
        (real,) = batch
        g_opt, d_opt = self.optimizers()  # type: ignore[misc]
        noise = torch.randn(real.shape[0], self.latent)
        ones = torch.ones(real.shape[0], 1)
        zeros = torch.zeros(real.shape[0], 1)
        bce = torch.nn.functional.binary_cross_entropy_with_logits

        self.toggle_optimizer(d_opt)
        fake = self.generator(noise).detach()
        d_loss = bce(self.discriminator(real), ones) + bce(self.discriminator(fake), zeros)
        d_opt.zero_grad()
        self.manual_backward(d_loss)
        decided = d_loss.detach()
        if self.synced:
            decided = self.trainer.strategy.reduce(decided, reduce_op="mean")
        if float(decided) > D_LOSS_FLOOR:  # buggy twin: this rank's own loss decides
            d_opt.step()
        else:
            self.d_skips += 1
        self.untoggle_optimizer(d_opt)

        self.toggle_optimizer(g_opt)
        g_loss = bce(self.discriminator(self.generator(noise)), ones)
        g_opt.zero_grad()
        self.manual_backward(g_loss)
        g_opt.step()
        self.untoggle_optimizer(g_opt)

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        return [
            torch.optim.Adam(self.generator.parameters(), lr=0.01),
            torch.optim.Adam(self.discriminator.parameters(), lr=0.01),
        ]


def _run(synced: bool) -> int:
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    real = torch.randn(48, 2, generator=generator) * 0.5 + torch.tensor([2.0, -1.0])
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy=DDPStrategy(find_unused_parameters=True) if devices > 1 else "auto",
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Gan(synced)
    trainer.fit(model, DataLoader(TensorDataset(real), batch_size=4))
    return model.d_skips


def train_buggy() -> int:
    """Bug: the discriminator step is skipped on a rank-local loss."""
    return _run(synced=False)


def train_fixed() -> int:
    """Fixed: the skip is decided on the loss averaged across ranks."""
    return _run(synced=True)
