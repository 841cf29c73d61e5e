"""A resume that falls back to a fresh start on one rank alone: the ranks part.

Pattern: a preemptible job that warm-starts by hand. Rank 0 keeps ``resume.pt`` (the
weights and the step reached) every two steps, written atomically (a temporary file,
then ``os.replace``). A restarted job reads it back in ``setup`` and trains only the
batches left.

Bug (``train_buggy``): a resume file a rank cannot read (a flaky read of shared
storage, a file being replaced under it) is logged and skipped -- on that rank alone.
That rank starts from batch 0 and plans every batch; its peer resumes and plans the
batches left. DDP hands every rank rank 0's weights, so nothing looks wrong at once, but
the ranks now run different numbers of steps: one returns from ``fit`` while its peer
waits in a gradient all-reduce that never comes (on NCCL the job hangs until the
watchdog kills it). In production it is a job that hangs *after* it was requeued.

Fix (``train_fixed``): the ranks agree on the fallback. Each says whether it read the
file, one all-reduce (MIN) tells all of them whether every rank did, and if one could
not, every rank starts fresh together: a consistent recovery.

Found by the default search as a crash (or any error) that ends the first run, a restart,
and an error reading the resume file on one rank while the job resumes::

    chaoslight fuzz examples/restart/resume_fallback.py:train_buggy

    restarts 1
    crash@lightning.training_step rank=0 step=3
    raise@torch.load rank=1 run=2
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Subset, TensorDataset

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl  # type: ignore[no-redef]

RESUME = Path("resume.pt")
EVERY = 2  # steps between resume files
BATCHES = 8  # per rank, in the one epoch
BATCH_SIZE = 4


class Model(pl.LightningModule):
    """A one-layer regression that resumes by hand from ``resume.pt``."""

    def __init__(self, agree: bool) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.agree = agree
        self.start = 0  # the batch this run starts at

    def setup(self, stage: str) -> None:
        loaded = self._read_resume_file()
        if self.agree and dist.is_available() and dist.is_initialized():
            every_rank = torch.tensor([1.0 if loaded is not None else 0.0])
            dist.all_reduce(every_rank, op=dist.ReduceOp.MIN)
            if every_rank.item() == 0:
                loaded = None  # a peer could not read it: every rank starts fresh
        if loaded is not None:
            self.layer.load_state_dict(loaded["weights"])
            self.start = int(loaded["step"])

    def _read_resume_file(self) -> dict[str, Any] | None:
        if not RESUME.exists():
            return None
        try:
            return torch.load(RESUME)
        except Exception as error:  # the bug, without agreement: this rank alone falls back
            warnings.warn(f"cannot read {RESUME} ({error}); starting fresh", stacklevel=2)
            return None

    def train_dataloader(self) -> DataLoader:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        generator = torch.Generator().manual_seed(0)
        rows = BATCHES * BATCH_SIZE * world
        data = TensorDataset(
            torch.randn(rows, 4, generator=generator), torch.randn(rows, 1, generator=generator)
        )
        left = Subset(data, range(self.start * BATCH_SIZE * world, rows))
        return DataLoader(left, batch_size=BATCH_SIZE)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        step = self.start + batch_idx + 1
        if self.trainer.is_global_zero and step % EVERY == 0:
            temporary = RESUME.with_suffix(".tmp")
            torch.save({"weights": self.layer.state_dict(), "step": step}, temporary)
            os.replace(temporary, RESUME)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _train(agree: bool) -> None:
    pl.seed_everything(0, verbose=False)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Model(agree))


def train_buggy() -> None:
    """Bug: a rank that cannot read the resume file starts fresh alone."""
    _train(agree=False)


def train_fixed() -> None:
    """Fixed: the ranks agree, with one all-reduce, on resuming or starting fresh."""
    _train(agree=True)
