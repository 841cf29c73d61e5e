"""A tiny Lightning DDP training: a chaoslight World target, or a torchrun script.

    with chaoslight.World(size=2) as world:
        schedule = chaoslight.Schedule([chaoslight.Raise(site="lightning.training_step",
                                                         rank=1, step=2)])
        outcome = world.run("examples/ddp_train.py:train", schedule, timeout=30)
        print(outcome.status, outcome.ranks[1].exception)

The World's contract: ``train`` takes no arguments, is called in every rank, builds its
``Trainer(accelerator="cpu", devices=N, strategy="ddp")`` with N the job's world size,
and calls ``fit``. What it returns (here the final weights) comes back per rank.
Also runs as ``torchrun --nproc-per-node 2 examples/ddp_train.py``.
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

MAX_STEPS = 4


class TinyRegression(pl.LightningModule):
    """One linear layer fitted by SGD; logs its loss synchronised across ranks."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, sync_dist=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loader(batches: int = 8, batch_size: int = 4) -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batches * batch_size, 4, generator=generator)
    y = x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(batches * batch_size, 1, generator=generator)
    return DataLoader(TensorDataset(x, y), batch_size=batch_size)


def world_size() -> int:
    """The job's rank count: the process group's if it exists, else ``WORLD_SIZE``.

    Lightning's teardown deletes ``WORLD_SIZE`` from the environment after a fit, so a
    second fit in the same process must not rely on it (a World restores it anyway).
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return int(torch.distributed.get_world_size())
    return int(os.environ.get("WORLD_SIZE", "1"))


def trainer(max_steps: int = MAX_STEPS, **options: Any) -> pl.Trainer:
    """A quiet CPU DDP Trainer over every rank of the job."""
    devices = world_size()
    settings: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": devices,
        "strategy": "ddp" if devices > 1 else "auto",
        "max_steps": max_steps,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
    }
    settings.update(options)
    return pl.Trainer(**settings)


def train() -> list[float]:
    """Fit TinyRegression for a few steps; return its final weights (bit-identical per rank)."""
    pl.seed_everything(0, verbose=False)
    model = TinyRegression()
    trainer().fit(model, loader())
    return [float(v) for v in torch.cat([p.detach().reshape(-1) for p in model.parameters()])]


if __name__ == "__main__":
    print(train())
