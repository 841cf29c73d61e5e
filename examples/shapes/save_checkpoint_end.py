"""``trainer.save_checkpoint`` after fit, then a reload and a check of the weights.

Shape: after ``fit`` the program calls ``trainer.save_checkpoint("final.ckpt")`` on every
rank (Lightning writes on rank 0 and ends with a barrier), then every rank loads the file
with ``torch.load`` and compares it with its own weights.

Why it is correct: every rank calls ``save_checkpoint`` (its barrier has all partners); the
read happens after the barrier, so the file is complete; the replicas are identical, so
every rank's comparison holds.
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


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def train() -> None:
    """Fit two epochs, save the final checkpoint, reload it on every rank."""
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=generator)
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
    trainer.save_checkpoint("final.ckpt")
    state = torch.load("final.ckpt", map_location="cpu", weights_only=False)["state_dict"]
    for name, value in model.state_dict().items():
        assert torch.equal(state[name], value), name


if __name__ == "__main__":
    train()
