"""Rank 0 prepares a shared file in ``setup``; the other ranks poll for it with no deadline.

Failure mode: before training, one rank does the slow preparation once (downloads a
dataset, builds a vocabulary, computes normalisation statistics) and writes the result to
shared storage; the other ranks wait for the file to appear and read it. The wait is the
familiar loop ``while not os.path.exists(path): time.sleep(...)``, with no deadline. Here
rank 0 computes the feature means in ``LightningModule.setup`` and writes
``feature-stats.json`` atomically; rank 1 polls for it. Whenever rank 0 stops making
progress before it writes the file (a host paused or thrashing, a thread stuck in native
code holding the GIL, a SIGSTOP), rank 1 waits forever: it is in no collective, so no
process-group timeout or NCCL watchdog ever ends it, and the job holds its GPUs doing
nothing. Public cases of the pattern: mosaicml/streaming's ``wait_for_file_to_exist``
carries a ``download_timeout`` for exactly this (streaming#723 made the non-zero ranks'
error point at rank 0), and NVIDIA/cosmos-framework#65 replaced a rank-0-only download,
which the other ranks did not wait for at all, with a rendezvous.

What exposes it: a ``freeze`` (a rank stopped alive), which the default search draws,
and first as a probe: a freeze for good at the first step of each user hook that is not
per batch, here ``lightning.setup`` on rank 0. The verdict names the frozen rank as the
cause and rank 1 as the finding: outside every site, waiting with no deadline outside
torch.distributed (``time.sleep`` in ``setup``).

    chaoslight fuzz examples/catalogue/rank0_prepared_stats.py:train_buggy

The fixed twin waits in ``trainer.strategy.barrier()`` after rank 0 writes: a collective,
which the process group's timeout ends when a rank never arrives (the peer waiting in it
is a consequence, not a finding). A poll with a deadline that raises would do as well.
On a GPU the freeze looks the same to NCCL as to gloo; only the timeouts differ.
"""

from __future__ import annotations

import json
import os
import time

import torch
from _catalogue_common import Regressor, dataset, seeded, write_atomically
from torch.utils.data import DataLoader

STATS = "feature-stats.json"
POLL_SECONDS = 0.05


class NormalisedRegressor(Regressor):
    """Centres its inputs by feature means that one rank computes and shares by a file."""

    def __init__(self, rendezvous: bool) -> None:
        super().__init__()
        self.rendezvous = rendezvous
        self.register_buffer("mean", torch.zeros(4))

    def setup(self, stage: str) -> None:
        if self.trainer.is_global_zero:
            means = dataset(32).tensors[0].mean(dim=0)  # stands for the slow preparation
            write_atomically(STATS, json.dumps(means.tolist()))
        if self.rendezvous:
            self.trainer.strategy.barrier("feature stats written")
        while not os.path.exists(STATS):  # the bug (without the barrier): no deadline
            time.sleep(POLL_SECONDS)
        with open(STATS) as handle:
            self.mean.copy_(torch.tensor(json.load(handle)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x - self.mean)


def _run(rendezvous: bool) -> float:
    fit = seeded(max_epochs=2)
    model = NormalisedRegressor(rendezvous)
    fit.fit(model, DataLoader(dataset(32), batch_size=4))
    return float(model.layer.weight.sum())


def train_buggy() -> float:
    """Bug: the other ranks poll for rank 0's file with no deadline."""
    return _run(rendezvous=False)


def train_fixed() -> float:
    """Fixed: every rank meets rank 0 in a barrier once the file is written."""
    return _run(rendezvous=True)
