"""A correct resumable DDP job whose only failure under a preemption is Lightning's own,
whatever other fault fires beside it.

The program: a small regressor, Adam, ``self.log(..., sync_dist=True)`` in the training
and validation steps (a collective per step), ``ModelCheckpoint(save_last=True)`` and
``fit(ckpt_path="last")``, so a requeued job resumes. Nothing in it is wrong.

On Lightning 2.5.2-2.6.x a SIGTERM is answered by a ``dist.broadcast`` inside the signal
handler, which pairs with whatever collective a peer is in (here the peer's ``sync_dist``
barrier): the ranks' sequences of collectives shift and the job hangs. That is the known
issue ``lightning-sigterm-broadcast``. A search that combines the preemption with any other
fault must still report it as Lightning's: a freeze, a delay, a repeated batch, a flipped
bit of optimizer state or a reordered all-reduce beside it changes nothing of what the
ranks' ends show (``tests/test_known_beside_faults.py`` replays five such schedules).

``train_fixed`` applies the documented workaround: once Lightning has installed its
handler it is replaced by one that only sets a flag, every rank joins one MAX all-reduce
of the flag at each batch start, and all stop together at the end of the epoch in which
they agreed (and the job exits 143 so the scheduler requeues it). At the epoch's end,
because its checkpoint is the epoch-end ``last.ckpt``: stopped mid-epoch, Lightning
counts the cut-short epoch as finished in that checkpoint and the requeued job would
skip the rest of it (``restart-equivalence`` under ``restarts 1`` +
``preempt@lightning.training_step step=0`` found that in an earlier version of this
program, which stopped at the batch start).

    chaoslight fuzz examples/known_issues/sigterm_beside_faults.py:train   # known issue, exit 0
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint
except ImportError:  # the older package name
    import pytorch_lightning as pl  # type: ignore[no-redef]
    from pytorch_lightning.callbacks import ModelCheckpoint  # type: ignore[no-redef]


class Regressor(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = torch.nn.Linear(8, 16)
        self.out = torch.nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(x)))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self(x), y)
        self.log("train_loss", loss, sync_dist=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self(x), y), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)


class AgreedStop(pl.Callback):
    """The workaround: a flag in the handler, agreed on at each batch start, one stop at
    the end of that epoch (its checkpoint resumes exactly)."""

    def __init__(self) -> None:
        self.signalled = False
        self.agreed = False  # every rank's all-reduce said so: the same on every rank

    def on_train_start(self, trainer: Any, module: Any) -> None:
        signal.signal(signal.SIGTERM, self._on_sigterm)  # after Lightning installed its own

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.signalled = True  # nothing else in a handler: no collective, no I/O

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, index: int) -> None:
        flag = torch.tensor([1.0 if self.signalled else 0.0])
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item() > 0:
            self.signalled = self.agreed = True

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        if self.agreed:
            trainer.should_stop = True


def _data(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


def _fit(fixed: bool) -> None:
    pl.seed_everything(1, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    stop = AgreedStop()
    callbacks: list[Any] = [ModelCheckpoint(dirpath="checkpoints", save_last=True)]
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=3,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        log_every_n_steps=1,
        callbacks=[*callbacks, stop] if fixed else callbacks,
    )
    train = DataLoader(_data(64, 0), batch_size=8)
    val = DataLoader(_data(16, 1), batch_size=8)
    trainer.fit(Regressor(), train, val, ckpt_path="last")
    if fixed and stop.signalled:
        sys.exit(143)  # stopped early on a notice: tell the scheduler to requeue


def train() -> None:
    _fit(fixed=False)


def train_fixed() -> None:
    _fit(fixed=True)
