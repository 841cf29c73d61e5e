"""An exponential moving average of the weights, kept by a callback and checkpointed.

Shape: a callback keeps an EMA copy of the parameters, updated in
``on_train_batch_end`` (after the optimizer step), swaps it in for validation
(``on_validation_start`` / ``on_validation_end``) and saves it through its own
``state_dict``; ``ModelCheckpoint(save_last=True)`` writes the callback state.

Why it is correct: the EMA is a deterministic function of the (synchronised) weights, so
every rank's copy is identical; the swap is local and undone on every rank; the
checkpoint is written by rank 0 after a barrier every rank joins.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]
    from pytorch_lightning.callbacks import ModelCheckpoint  # type: ignore[assignment]


class EMA(pl.Callback):
    def __init__(self, decay: float = 0.9) -> None:
        self.decay = decay
        self.shadow: dict[str, torch.Tensor] = {}
        self.backup: dict[str, torch.Tensor] = {}

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self.shadow:
            self.shadow = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}

    @torch.no_grad()
    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        for name, value in pl_module.state_dict().items():
            self.shadow[name].mul_(self.decay).add_(value, alpha=1 - self.decay)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.backup = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}
        pl_module.load_state_dict(self.shadow)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        pl_module.load_state_dict(self.backup)
        self.backup = {}

    def state_dict(self) -> dict[str, Any]:
        return {"shadow": self.shadow}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.shadow = state_dict["shadow"]


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def make_data(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


def train() -> None:
    """Fit three epochs with an EMA callback, validating with the averaged weights."""
    pl.seed_everything(0, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=3,
        num_sanity_val_steps=0,
        callbacks=[EMA(), ModelCheckpoint(dirpath="checkpoints", save_last=True, save_top_k=0)],
        logger=False,
        enable_checkpointing=True,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(
        Model(),
        DataLoader(make_data(32, 0), batch_size=4, shuffle=True),
        DataLoader(make_data(16, 1), batch_size=4),
    )


if __name__ == "__main__":
    train()
