"""A best-effort per-rank debug dump whose errors are handled locally.

Shape: each rank keeps a small debug file of its own (``debug/rank<N>.pt``).
``on_train_start`` reads the previous one under ``contextlib.suppress(FileNotFoundError,
EOFError)`` (none on a first run); ``on_train_epoch_end`` writes it with ``torch.save``
to a temporary file inside ``try/except OSError`` (a full disk: the dump is skipped with a
warning) and moves it into place with ``os.replace``, so a crash mid-write leaves the last
dump whole for the restarted job to read.

Why it is correct: the file is this rank's alone and nothing that trains reads it: what
one rank does when its read or write fails changes no collective, no parameter and no
decision of its peers, so a failure handled on one rank leaves the ranks in step.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
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
        self.previous: dict[str, Any] = {}
        self.losses: list[float] = []

    def _debug_file(self) -> Path:
        return Path("debug") / f"rank{self.global_rank}.pt"

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.losses.append(float(loss.detach()))
        return loss

    def on_train_start(self) -> None:
        with contextlib.suppress(FileNotFoundError, EOFError):
            self.previous = torch.load(self._debug_file())

    def on_train_epoch_end(self) -> None:
        dump = {"epoch": self.current_epoch, "losses": list(self.losses)}
        path = self._debug_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".tmp")
        try:
            torch.save(dump, partial)
        except OSError as error:  # a full disk: the dump is only for debugging
            print(f"rank {self.global_rank}: debug dump skipped: {error}")
        else:
            os.replace(partial, path)  # atomic: a reader sees the old dump or the new one
        self.losses.clear()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def train() -> float:
    """Fit two epochs with a per-rank debug dump; return the trained weight sum."""
    pl.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=generator)
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
    trainer.fit(model, DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4))
    return float(model.layer.weight.sum())
