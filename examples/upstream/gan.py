"""The GAN with manual optimization, adapted from Lightning's
``examples/pytorch/domain_templates/generative_adversarial_net.py``.

Shape: ``automatic_optimization = False`` and two Adam optimizers (``betas=(0.5,
0.999)``); ``training_step(self, batch)`` with no ``batch_idx``; each step first trains
the generator through the discriminator, then the discriminator on real images and on
detached fakes, each between ``toggle_optimizer`` and ``untoggle_optimizer``, with its own
``zero_grad``, ``manual_backward`` and ``step``; the generator's blocks have
``BatchNorm1d(features, 0.8)`` (upstream's eps of 0.8) and ``LeakyReLU(inplace=True)``;
``validation_z`` is drawn once in ``__init__``; ``on_train_epoch_end`` generates from it
(upstream logs the grid to TensorBoard; here the mean is kept). Each loss reaches only
some parameters, so DDP runs with ``find_unused_parameters=True`` (upstream's comment on
``DDPStrategy``).

Why it is correct: every rank runs both backwards and both optimizer steps at every batch
in the same order; the noise comes from the global generator that ``seed_everything``
seeds identically on every rank, so the generator's batch statistics and ``validation_z``
are the same on every rank; DDP broadcasts rank 0's buffers at each step anyway.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from _upstream_common import devices, pl, quiet_trainer
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

try:
    from lightning.pytorch.strategies import DDPStrategy
except ImportError:  # the standalone package
    from pytorch_lightning.strategies import DDPStrategy  # type: ignore[assignment]

IMG_SHAPE = (1, 4, 4)


class Generator(nn.Module):
    def __init__(self, latent_dim: int = 8, img_shape: tuple[int, ...] = IMG_SHAPE) -> None:
        super().__init__()
        self.img_shape = img_shape

        def block(in_feat: int, out_feat: int, normalize: bool = True) -> list[nn.Module]:
            layers: list[nn.Module] = [nn.Linear(in_feat, out_feat)]
            if normalize:
                layers.append(nn.BatchNorm1d(out_feat, 0.8))
            layers.append(nn.LeakyReLU(0.2, inplace=True))
            return layers

        self.model = nn.Sequential(
            *block(latent_dim, 16, normalize=False),
            *block(16, 32),
            nn.Linear(32, int(math.prod(img_shape))),
            nn.Tanh(),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        img = self.model(z)
        return img.view(img.size(0), *self.img_shape)


class Discriminator(nn.Module):
    def __init__(self, img_shape: tuple[int, ...] = IMG_SHAPE) -> None:
        super().__init__()
        self.model = nn.Sequential(
            nn.Linear(int(math.prod(img_shape)), 32),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(32, 16),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(16, 1),
        )

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        return self.model(img.view(img.size(0), -1))


class GAN(pl.LightningModule):
    def __init__(
        self, lr: float = 0.0002, b1: float = 0.5, b2: float = 0.999, latent_dim: int = 8
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.generator = Generator(latent_dim=latent_dim)
        self.discriminator = Discriminator()
        self.validation_z = torch.randn(8, latent_dim)
        self.sample_means: list[float] = []

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.generator(z)

    @staticmethod
    def adversarial_loss(y_hat: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(y_hat, y)

    def training_step(self, batch: Any) -> None:
        imgs, _ = batch
        opt_g, opt_d = self.optimizers()
        z = torch.randn(imgs.shape[0], self.hparams.latent_dim).type_as(imgs)

        valid = torch.ones(imgs.size(0), 1).type_as(imgs)
        self.toggle_optimizer(opt_g)
        g_loss = self.adversarial_loss(self.discriminator(self(z)), valid)
        opt_g.zero_grad()
        self.manual_backward(g_loss)
        opt_g.step()
        self.untoggle_optimizer(opt_g)

        self.toggle_optimizer(opt_d)
        real_loss = self.adversarial_loss(self.discriminator(imgs), valid)
        fake = torch.zeros(imgs.size(0), 1).type_as(imgs)
        fake_loss = self.adversarial_loss(self.discriminator(self(z).detach()), fake)
        d_loss = (real_loss + fake_loss) / 2
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        opt_d.step()
        self.untoggle_optimizer(opt_d)

        self.log_dict({"d_loss": d_loss, "g_loss": g_loss})

    def configure_optimizers(self) -> tuple[torch.optim.Optimizer, torch.optim.Optimizer]:
        lr, b1, b2 = self.hparams.lr, self.hparams.b1, self.hparams.b2
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=lr, betas=(b1, b2))
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=lr, betas=(b1, b2))
        return opt_g, opt_d

    def on_train_epoch_end(self) -> None:
        z = self.validation_z.type_as(self.generator.model[0].weight)
        with torch.no_grad():
            self.sample_means.append(float(self(z).mean()))


def real_images(n: int = 64) -> TensorDataset:
    """Bright squares in a dark frame, jittered: the "real" distribution."""
    generator = torch.Generator().manual_seed(7)
    base = -torch.ones(*IMG_SHAPE)
    base[:, 1:3, 1:3] = 1.0
    imgs = (base + 0.2 * torch.randn(n, *IMG_SHAPE, generator=generator)).clamp(-1, 1)
    return TensorDataset(imgs, torch.zeros(n, dtype=torch.long))


def train() -> list[float]:
    """Train the GAN for two epochs; the mean of the generated samples per epoch."""
    pl.seed_everything(42, verbose=False)
    model = GAN()
    ddp = {"strategy": DDPStrategy(find_unused_parameters=True)} if devices() > 1 else {}
    trainer = quiet_trainer(max_epochs=2, enable_checkpointing=False, **ddp)
    trainer.fit(model, DataLoader(real_images(), batch_size=8, shuffle=True))
    return model.sample_means


if __name__ == "__main__":
    train()
