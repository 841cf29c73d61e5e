"""Resuming from an epoch-end checkpoint with DataLoader workers: a known framework issue
of Lightning 2.5.3 and later (issue #21938, open; since PR #20775).

Shape: a shuffled training loader with worker processes (``num_workers=2``), Lightning's
``ModelCheckpoint(save_last=True)`` (it saves in ``on_train_epoch_end``) and a job that,
when restarted, resumes from ``last.ckpt``. A correct program. On the resume,
``FitLoop.setup_data`` makes the training iterator before the epoch loop sets the
sampler's epoch, and since 2.5.3 ``TrainingEpochLoop.on_run_start`` keeps that iterator
while resuming; an iterator with workers draws its first indices from the sampler when it
is made, so the first resumed epoch trains on epoch 0's order instead of its own. Nothing
fails: the job trains on other samples than an uninterrupted one.

``chaoslight fuzz`` finds it under a crash and a restart (``restart-equivalence``) and
reports it apart as Lightning's known issue::

    restarts 1
    crash@lightning.training_step rank=0 step=5

``train_fixed`` follows the workaround: ``use_distributed_sampler=False`` with the
program's own ``DistributedSampler``, whose epoch a callback sets from the checkpoint in
``on_load_checkpoint`` (before the fit makes the iterator); Lightning sets it at each later
epoch as before.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

try:
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]
    from pytorch_lightning.callbacks import ModelCheckpoint  # type: ignore[no-redef]

LAST = "checkpoints/last.ckpt"


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("loss", loss, sync_dist=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


class SamplerEpochOnResume(pl.Callback):
    """The workaround: the resumed epoch's order before the fit draws from the sampler."""

    def __init__(self, sampler: DistributedSampler[Any]) -> None:
        self.sampler = sampler

    def on_load_checkpoint(self, trainer: Any, module: Any, checkpoint: dict[str, Any]) -> None:
        # The epoch Lightning itself would set the sampler to (FitLoop.on_advance_start).
        progress = checkpoint["loops"]["fit_loop"]["epoch_progress"]["current"]
        self.sampler.set_epoch(int(progress["processed"]))


def _fit(workaround: bool) -> int:
    pl.seed_everything(0, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 8, generator=generator)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    callbacks: list[Any] = [ModelCheckpoint(dirpath="checkpoints", save_last=True)]
    if workaround:
        sampler: DistributedSampler[Any] = DistributedSampler(data, shuffle=True, seed=0)
        loader = DataLoader(data, batch_size=4, sampler=sampler, num_workers=2)
        callbacks.append(SamplerEpochOnResume(sampler))
    else:
        loader = DataLoader(data, batch_size=4, shuffle=True, num_workers=2)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=3,
        use_distributed_sampler=not workaround,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
    )
    resume = LAST if os.path.exists(LAST) else None  # a restarted job resumes
    trainer.fit(Model(), loader, ckpt_path=resume)
    # A job restarted after its last checkpoint trains nothing and logs nothing: the step
    # count is what every run of it has.
    return int(trainer.global_step)


def train() -> int:
    """A correct program: the resumed epoch trains on epoch 0's order (Lightning's bug)."""
    return _fit(workaround=False)


def train_fixed() -> int:
    """The workaround: the program's own sampler, its epoch set from the checkpoint."""
    return _fit(workaround=True)


if __name__ == "__main__":
    train()
