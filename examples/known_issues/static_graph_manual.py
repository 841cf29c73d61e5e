"""Manual optimization under ``DDPStrategy(static_graph=True)``: a known framework issue
(Lightning PR #21251, fixed in 2.6.0).

Shape: ``automatic_optimization = False`` and ``strategy=DDPStrategy(static_graph=True)``.
With a static graph, DDP holds back the gradient all-reduce of the first iteration until
its own end-of-backward callback, which Lightning's manual-optimization path (it calls
``prepare_for_backward`` itself) never reaches: the first step applies each rank's own
local gradient, the replicas part there and never meet again. Nothing fails; every rank
saves a different model.

``chaoslight fuzz`` finds it with no fault at all (``replicas-in-sync`` at the first
optimizer step) and, on Lightning 2.0-2.5, reports it apart as Lightning's known issue::

    chaoslight fuzz examples/known_issues/static_graph_manual.py:train
    chaoslight fuzz examples/known_issues/static_graph_manual.py:train_fixed --strict

``train_fixed`` follows the workaround: ``static_graph=False`` (the default).
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
    from pytorch_lightning.strategies import DDPStrategy  # type: ignore[no-redef]


class ManualModel(pl.LightningModule):
    """One optimizer, stepped by hand: the documented manual-optimization loop."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        optimizer = self.optimizers()
        optimizer.zero_grad()
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.manual_backward(loss)
        optimizer.step()
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _fit(static_graph: bool) -> None:
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=generator)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy=DDPStrategy(static_graph=static_graph) if devices > 1 else "auto",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(ManualModel(), DataLoader(data, batch_size=4, shuffle=True))


def train() -> None:
    """Manual optimization with a static DDP graph (replicas part at the first step on
    Lightning before 2.6: Lightning's bug)."""
    _fit(static_graph=True)


def train_fixed() -> None:
    """The same fit with the workaround: the default dynamic graph."""
    _fit(static_graph=False)


if __name__ == "__main__":
    train()
