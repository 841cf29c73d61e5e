"""``trainer.test`` and ``trainer.predict`` after ``trainer.fit``, with the same Trainer.

Shape: three loops on one Trainer: fit, then test (``test_step`` logs a synced metric),
then predict (``predict_step`` returns predictions, gathered by the program with
``all_gather`` in ``on_predict_epoch_end``).

Why it is correct: every rank runs every loop on its own shard (Lightning's
``DistributedSampler``); test and predict have no backward, and every rank logs and
gathers the same things at the same points, so every collective has all its partners.
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


def make_data(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.predicted_rows = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self(x), y)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test_mse", torch.nn.functional.mse_loss(self(x), y), sync_dist=True)

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        x, _ = batch
        return self(x)

    def on_predict_epoch_end(self) -> None:
        count = torch.tensor(float(self.trainer.num_predict_batches[0]))
        gathered = self.all_gather(count)
        assert isinstance(gathered, torch.Tensor)
        self.predicted_rows = int(gathered.sum())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def train() -> int:
    """Fit, test, then predict; return the number of prediction batches over all ranks."""
    pl.seed_everything(0, verbose=False)
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
    trainer.fit(model, DataLoader(make_data(32, 0), batch_size=4, shuffle=True))
    trainer.test(model, DataLoader(make_data(16, 1), batch_size=4), verbose=False)
    predictions = trainer.predict(model, DataLoader(make_data(16, 2), batch_size=4))
    assert predictions is not None and len(predictions) == 16 // 4 // devices
    return model.predicted_rows


if __name__ == "__main__":
    train()
