"""2-rank Lightning targets for tests/test_learned_invariants.py (a World loads them by path)."""

from __future__ import annotations

import importlib.util
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]


class Regressor(pl.LightningModule):
    """A linear regressor with a validation loss synced across ranks."""

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


def _data(n: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, x.sum(1, keepdim=True))


def timed_validation() -> float:
    """Correct: validation every 0.3 s of training (Lightning decides by the clock), so a
    straggler moves the steps where the validation loader draws its seed from the RNG."""
    pl.seed_everything(0, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=1,
        val_check_interval=timedelta(seconds=0.3),
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Regressor()
    trainer.fit(model, DataLoader(_data(64), batch_size=4), DataLoader(_data(16), batch_size=4))
    return float(trainer.global_step)


def _slow_epoch_rng(slow_s: float) -> Any:
    """examples/bugs/slow_epoch_rng with its "slow epoch" threshold raised to ``slow_s``.

    The example's 0.4 s is what a quiet machine needs; on a loaded one a fault-free epoch
    can take that long, the fault-free references then disagree on the RNG themselves and
    nothing is learned. A threshold no fault-free epoch reaches keeps the test about the
    straggler, not about the machine's load."""
    path = Path(__file__).resolve().parent.parent / "examples" / "bugs" / "slow_epoch_rng.py"
    spec = importlib.util.spec_from_file_location("slow_epoch_rng_for_tests", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.SLOW_S = slow_s
    return module


SLOW_EPOCH_S = 2.0  # the straggler the test injects is longer; no fault-free epoch is


def slow_epoch_rng_buggy() -> float:
    return float(_slow_epoch_rng(SLOW_EPOCH_S).train_buggy())


def slow_epoch_rng_fixed() -> float:
    return float(_slow_epoch_rng(SLOW_EPOCH_S).train_fixed())
