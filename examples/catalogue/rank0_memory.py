r"""Rank 0 allocating an extra large tensor every step: it alone runs out of memory.

Failure mode: a callback renders a picture of the model's predictions every step for an
epoch-end grid, and, like all logging, only on rank 0 (``if trainer.is_global_zero``).
The frames are kept until the epoch ends. Every step rank 0 holds 2 MiB more than its
peers; on a GPU whose memory the model already nearly fills, rank 0 runs out at some step
while rank 1 is fine. The job must then fail **on both ranks, promptly**: rank 0 with the
``CUDA out of memory`` error, rank 1 released from the collective it waits in, instead
of rank 1 hanging in its next all-reduce for the NCCL timeout (30 min by default).

In production: "OOM on GPU 0 only", at a step that moves when the batch size or the
logging interval changes; ``nvidia-smi`` shows GPU 0 fuller than the others.

What exposes it: a memory budget, which the default search does not draw (it would need
the device's size). ``rank0_memory.txt`` (next to this file) gives every rank a 12 MiB
simulated device; factory calls (``torch.zeros`` here) of 1 MiB or more count against it
while their tensors live. Rank 0 goes over at step 6 and raises the simulated CUDA OOM;
rank 1, already on its way into step 7's collectives, is released, and the run is
reported as failed (with no fault injected: the program does not fit the budget), not
hung:

    chaoslight replay examples/catalogue/rank0_memory.txt \
        examples/catalogue/rank0_memory.py:train_buggy

``chaoslight fuzz`` with default arguments does *not* find this one (no budget, so the
frames fit in host memory): an honest miss, recorded in ``CATALOGUE``.

On a GPU the same schedule's budget stands for the device's free memory; the caching
allocator's reserved-but-unused blocks are not modelled
(``docs/explanation/cpu-vs-gpu.md``), so match the budget to what
``torch.cuda.max_memory_allocated`` shows, not to the card.

The fixed twin logs each frame when it is rendered and keeps only a float summary: one
frame lives at a time on rank 0, and the run fits the same budget.
"""

from __future__ import annotations

from typing import Any

import torch
from _catalogue_common import Regressor, dataset, pl, seeded
from torch.utils.data import DataLoader

FRAME = (2, 512, 512)  # float32: 2 MiB per frame


class PredictionFrames(pl.Callback):
    """Renders a frame from the model's predictions every step, on rank 0 only."""

    def __init__(self, keep_frames: bool) -> None:
        self.keep_frames = keep_frames
        self.frames: list[torch.Tensor] = []
        self.summaries: list[float] = []

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, *args: Any) -> None:
        if not trainer.is_global_zero:
            return
        frame = torch.zeros(FRAME)
        frame += float(outputs["loss"])  # stands for drawing the predictions
        if self.keep_frames:
            self.frames.append(frame)  # the bug: every frame lives until the epoch ends
        else:
            self.summaries.append(float(frame.mean()))  # logged now; the frame is freed

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        self.frames.clear()  # where the grid would be written


def _run(keep_frames: bool) -> None:
    fit = seeded(max_steps=8, callbacks=[PredictionFrames(keep_frames)])
    fit.fit(Regressor(), DataLoader(dataset(64), batch_size=4))


def train_buggy() -> None:
    """Bug: rank 0 keeps a 2 MiB frame per step until the epoch ends."""
    _run(keep_frames=True)


def train_fixed() -> None:
    """Fixed: each frame is summarised and dropped when it is rendered."""
    _run(keep_frames=False)
