"""What the corpus programs share: seeded data, the quiet CPU trainer, a tiny regressor.

Named ``_corpus_common`` (not ``_common``) because a World worker imports target files with
their folder on ``sys.path``: ``examples/planted/_common.py`` would shadow a second
``_common`` once both folders' programs ran in the same worker.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import TensorDataset

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl  # type: ignore[no-redef]

FEATURES = 4


def world_size() -> int:
    """Devices for the Trainer: the launcher's ``WORLD_SIZE``, else one."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank_and_world() -> tuple[int, int]:
    """This process's global rank and the world size, from the process group if there is one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def dataset(n: int = 64, seed: int = 0) -> TensorDataset:
    """``n`` random samples of a noisy linear target; every row of ``x`` is distinct."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, FEATURES, generator=generator)
    y = x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(n, 1, generator=generator)
    return TensorDataset(x, y)


def trainer(devices: int | None = None, **options: Any) -> pl.Trainer:
    """A quiet CPU Trainer, DDP when there is more than one device; ``options`` override."""
    devices = world_size() if devices is None else devices
    settings: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": devices,
        "strategy": "ddp" if devices > 1 else "auto",
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
        "log_every_n_steps": 1,
    }
    settings.update(options)
    return pl.Trainer(**settings)


class Regressor(pl.LightningModule):
    """One linear layer, MSE, plain SGD: the smallest model whose replicas can drift apart."""

    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(FEATURES, 1)
        self.lr = lr

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def write_atomically(path: str, text: str) -> None:
    """Write ``text`` to ``path`` so a reader sees the old file or the new one, never half:
    a temporary file, flushed to disk, renamed over the path (``os.replace`` is atomic)."""
    with open(path + ".tmp", "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(path + ".tmp", path)
