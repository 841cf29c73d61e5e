"""``StochasticWeightAveraging``: averaged weights from epoch 2, a new LR schedule.

Shape: the built-in SWA callback (``swa_lrs=0.01``, ``swa_epoch_start=2``) swaps in its
own ``SWALR`` scheduler at epoch 2, keeps an ``AveragedModel`` updated at each epoch end,
and at train end copies the averages into the model (and re-estimates batch norm
statistics with an extra pass over the training data).

Why it is correct: the averaged model is a deterministic function of the synchronised
weights, updated at the same epochs on every rank; the batch-norm pass runs the same
number of forwards on every rank (equal shards).
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import StochasticWeightAveraging
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]
    from pytorch_lightning.callbacks import StochasticWeightAveraging  # type: ignore[assignment]


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 1)
        )

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def train() -> None:
    """Fit four epochs, averaging the weights from epoch 2."""
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=generator)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=4,
        callbacks=[StochasticWeightAveraging(swa_lrs=0.01, swa_epoch_start=2)],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Model(), DataLoader(data, batch_size=4, shuffle=True))


if __name__ == "__main__":
    train()
