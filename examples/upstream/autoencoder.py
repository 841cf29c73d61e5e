"""The basic autoencoder, adapted from Lightning's ``examples/pytorch/basics/autoencoder.py``.

Shape: a ``LightningDataModule`` that builds its data sets in ``__init__`` (a seeded
``random_split`` into train and validation, a separate test set) and serves train, val,
test and predict loaders; an encoder/decoder MLP whose ``_common_step`` logs
``{stage}_loss`` with ``on_step=True``; upstream's ``ImageSampler`` callback, decorated
``@rank_zero_only``, which on rank 0 alone runs the model in eval mode on three validation
images at each epoch end and saves the reconstructions (``grid_generated_<epoch>.pt``,
the ``save_image`` of upstream); the default ``ModelCheckpoint``; then, as upstream's
``cli_main``, ``fit``, ``test(ckpt_path="best")`` and ``predict(ckpt_path="best")``.

Why it is correct: every rank logs the same keys at the same points; the sampler callback
runs no collective (the ``LightningModule`` is called directly, not its DDP wrapper) and
writes a file only rank 0 reads; "best" is the checkpoint every rank's callback agrees on
(no ``monitor``: the last one saved), and Lightning broadcasts its path.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from _upstream_common import IMAGE, pl, quiet_trainer, synthetic_digits
from torch import nn
from torch.utils.data import DataLoader, random_split

try:
    from lightning.pytorch.utilities import rank_zero_only
except ImportError:  # the standalone package
    from pytorch_lightning.utilities import rank_zero_only  # type: ignore[no-redef]

PIXELS = IMAGE[0] * IMAGE[1] * IMAGE[2]


class ImageSampler(pl.Callback):
    """Reconstructs a few validation images at each epoch end, on rank 0 only."""

    def __init__(self, num_samples: int = 3) -> None:
        super().__init__()
        self.num_samples = num_samples

    @rank_zero_only
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        loader = DataLoader(trainer.datamodule.mnist_val, batch_size=self.num_samples)
        images, _ = next(iter(loader))
        with torch.no_grad():
            pl_module.eval()
            generated = pl_module(images.view(images.size(0), -1).to(pl_module.device))
            pl_module.train()
        if trainer.current_epoch == 0:
            torch.save(images, f"grid_ori_{trainer.current_epoch}.pt")
        torch.save(generated.reshape(images.shape), f"grid_generated_{trainer.current_epoch}.pt")


class LitAutoEncoder(pl.LightningModule):
    def __init__(self, hidden_dim: int = 16, learning_rate: float = 10e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.encoder = nn.Sequential(
            nn.Linear(PIXELS, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 3)
        )
        self.decoder = nn.Sequential(
            nn.Linear(3, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, PIXELS)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._common_step(batch, batch_idx, "train")

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._common_step(batch, batch_idx, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._common_step(batch, batch_idx, "test")

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        return self(self._prepare_batch(batch))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)

    def _prepare_batch(self, batch: Any) -> torch.Tensor:
        x, _ = batch
        return x.view(x.size(0), -1)

    def _common_step(self, batch: Any, batch_idx: int, stage: str) -> torch.Tensor:
        x = self._prepare_batch(batch)
        loss = F.mse_loss(x, self(x))
        self.log(f"{stage}_loss", loss, on_step=True)
        return loss


class MyDataModule(pl.LightningDataModule):
    def __init__(self, batch_size: int = 8) -> None:
        super().__init__()
        dataset = synthetic_digits(80, seed=0)
        self.mnist_test = synthetic_digits(16, seed=1)
        self.mnist_train, self.mnist_val = random_split(
            dataset, [64, 16], generator=torch.Generator().manual_seed(42)
        )
        self.batch_size = batch_size

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_train, batch_size=self.batch_size)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_val, batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_test, batch_size=self.batch_size)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_test, batch_size=self.batch_size)


def train() -> int:
    """Fit, then test and predict from the best checkpoint; the predicted batches here."""
    pl.seed_everything(1234, verbose=False)
    model, datamodule = LitAutoEncoder(), MyDataModule()
    trainer = quiet_trainer(max_epochs=3, callbacks=[ImageSampler()])
    trainer.fit(model, datamodule=datamodule)
    trainer.test(ckpt_path="best", datamodule=datamodule, verbose=False)
    predictions = trainer.predict(ckpt_path="best", datamodule=datamodule)
    assert predictions is not None and predictions[0].shape[1] == PIXELS
    return len(predictions)


if __name__ == "__main__":
    train()
