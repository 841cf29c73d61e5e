"""A GAN-like model: two optimizers, manual optimization, two backwards per step.

Shape: ``automatic_optimization = False``; each step updates a discriminator (on real
samples and detached fakes), then the generator (through the discriminator). Each loss
reaches only some parameters, so DDP runs with ``find_unused_parameters=True``;
``toggle_optimizer`` freezes the other network while one is updated.

Why it is correct: every rank runs both backwards and both optimizer steps at every batch,
in the same order; the noise comes from the seeded global generator, which Lightning's
``seed_everything`` sets identically per rank and which advances identically.
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


class Gan(pl.LightningModule):
    def __init__(self, latent: int = 3) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.latent = latent
        self.generator = torch.nn.Sequential(
            torch.nn.Linear(latent, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)
        )
        self.discriminator = torch.nn.Sequential(
            torch.nn.Linear(2, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)
        )

    def training_step(self, batch: Any, batch_idx: int) -> None:
        (real,) = batch
        g_opt, d_opt = self.optimizers()  # type: ignore[attr-defined]
        noise = torch.randn(real.shape[0], self.latent)
        ones = torch.ones(real.shape[0], 1)
        zeros = torch.zeros(real.shape[0], 1)
        bce = torch.nn.functional.binary_cross_entropy_with_logits

        self.toggle_optimizer(d_opt)
        fake = self.generator(noise).detach()
        d_loss = bce(self.discriminator(real), ones) + bce(self.discriminator(fake), zeros)
        d_opt.zero_grad()
        self.manual_backward(d_loss)
        d_opt.step()
        self.untoggle_optimizer(d_opt)

        self.toggle_optimizer(g_opt)
        g_loss = bce(self.discriminator(self.generator(noise)), ones)
        g_opt.zero_grad()
        self.manual_backward(g_loss)
        g_opt.step()
        self.untoggle_optimizer(g_opt)
        self.log_dict({"d_loss": d_loss.detach(), "g_loss": g_loss.detach()})

    def configure_optimizers(self) -> Any:
        return (
            torch.optim.Adam(self.generator.parameters(), lr=1e-3),
            torch.optim.Adam(self.discriminator.parameters(), lr=1e-3),
        )


def train() -> None:
    """Fit the GAN for two epochs on samples of a fixed 2-D Gaussian."""
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    real = torch.randn(32, 2, generator=generator) * 0.5 + torch.tensor([2.0, -1.0])
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
    trainer.fit(Gan(), DataLoader(TensorDataset(real), batch_size=4, shuffle=True))


if __name__ == "__main__":
    train()
