"""``self.all_gather`` of per-rank predictions in ``on_validation_epoch_end``.

Shape: ``validation_step`` collects its predictions and targets in lists; at the epoch end
every rank concatenates its own, all-gathers them (a collective) and computes a global
R^2 score that it logs without further sync (the value is already global).

Why it is correct: every rank calls ``all_gather`` at every validation epoch end with
tensors of the same shape (equal shards from the sampler), and every rank computes the
score from the same gathered tensor, so the ranks agree; lists are cleared each epoch.
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
        self.outputs: list[torch.Tensor] = []
        self.targets: list[torch.Tensor] = []
        self.scores: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.outputs.append(self.layer(x))
        self.targets.append(y)

    def on_validation_epoch_end(self) -> None:
        gathered = [self.all_gather(torch.cat(part)) for part in (self.outputs, self.targets)]
        assert all(isinstance(part, torch.Tensor) for part in gathered)
        outputs, targets = (torch.as_tensor(part).reshape(-1) for part in gathered)
        self.outputs.clear()
        self.targets.clear()
        residual = ((targets - outputs) ** 2).sum()
        total = ((targets - targets.mean()) ** 2).sum()
        score = 1 - residual / total
        self.scores.append(float(score))
        self.log("val_r2", score)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def train() -> list[float]:
    """Fit three epochs; return the R^2 of each validation over all ranks."""
    pl.seed_everything(0, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=3,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Model()
    trainer.fit(
        model,
        DataLoader(make_data(32, 0), batch_size=4, shuffle=True),
        DataLoader(make_data(16, 1), batch_size=4),
    )
    return model.scores


if __name__ == "__main__":
    train()
