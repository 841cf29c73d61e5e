"""Training by ``max_steps`` and resuming from an epoch-end checkpoint: a known framework
issue of Lightning 2.x (``FitLoop.on_run_start``, since PR #12821; unfixed in 2.6).

Shape: ``Trainer(max_steps=...)``, Lightning's default ``ModelCheckpoint`` (it saves in
``on_train_epoch_end``) with ``save_last=True``, and a job that, when restarted, resumes
from ``last.ckpt``. Lightning counts an epoch processed before ``on_train_epoch_end`` and
completed after it, so the checkpoint holds an epoch that is processed and not completed.
On a resume, ``FitLoop.on_run_start`` counts it completed only when ``max_steps`` is not
set: with ``max_steps`` the resumed fit takes the finished epoch for unfinished, trains
the next epoch's first batch as one more batch of it (with a fixed order, that batch is
trained twice) and never trains the last batch an uninterrupted run would. Nothing fails.

``chaoslight fuzz`` finds it under a crash and a restart (``restart-equivalence``) and
reports it apart as Lightning's known issue::

    restarts 1
    crash@lightning.training_step rank=0 step=6

``train_fixed`` keeps ``max_steps`` and follows the workaround: it checkpoints every
``BATCHES`` optimizer steps (the steps of one epoch), inside ``on_train_batch_end`` of
the epoch's last batch, which Lightning 2.5 and later resume exactly.
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
    from pytorch_lightning.callbacks import ModelCheckpoint  # type: ignore[no-redef]

STEPS = 10
BATCHES = 4  # per epoch and rank: one optimizer step each


class Model(pl.LightningModule):
    """A linear regression with a learning rate that decays every optimizer step."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        decay = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.8)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": decay, "interval": "step"}}


def _fit(checkpoint: ModelCheckpoint) -> int:
    pl.seed_everything(0, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    generator = torch.Generator().manual_seed(0)
    rows = BATCHES * 4 * devices
    x = torch.randn(rows, 4, generator=generator)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_steps=STEPS,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[checkpoint],
    )
    last = "checkpoints/last.ckpt"
    resume = last if os.path.exists(last) else None  # a restarted job resumes
    trainer.fit(Model(), DataLoader(data, batch_size=4), ckpt_path=resume)
    return int(trainer.global_step)


def train() -> int:
    """Checkpoint at epoch ends (Lightning's default) under max_steps: a resume repeats a
    batch (Lightning's bug)."""
    return _fit(ModelCheckpoint(dirpath="checkpoints", save_last=True))


def train_fixed() -> int:
    """The workaround: checkpoint every epoch's worth of optimizer steps instead."""
    return _fit(ModelCheckpoint(dirpath="checkpoints", every_n_train_steps=BATCHES, save_last=True))


if __name__ == "__main__":
    train()
