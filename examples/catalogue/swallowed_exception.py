"""An exception swallowed in ``training_step``: ``except RuntimeError: return None``.

Failure mode: the loss has a log-determinant term (a Cholesky factor of the batch's
feature covariance, as whitening and "volume" regularisers use). A degenerate batch makes
``torch.linalg.cholesky`` raise ``LinAlgError``, so the author wrapped the step in
``try: ... except RuntimeError: return None`` to "skip bad batches". ``RuntimeError`` is
also what a CUDA out-of-memory error (``torch.OutOfMemoryError``), a NCCL error and most
of torch's errors are: the skip swallows all of them, on the one rank where they happen.
What follows depends on how the module optimises (Lightning 2.6, checked in its source):

- **manual optimization** (``train_buggy``): the rank that returned ``None`` did no
  ``manual_backward``, so it joined no gradient all-reduce for that step; its peer waits
  in DDP's all-reduce inside ``backward`` while the skipping rank goes on to the next
  batch and waits in Lightning's per-batch ``broadcast``. The job **hangs** until the
  collective timeout (30 min with NCCL by default), and the OOM that started it is
  printed nowhere.
- **automatic optimization** (``train_buggy_automatic``): Lightning refuses ``None``
  from ``training_step`` when ``world_size > 1`` (``loops/optimization/automatic.py``):
  it raises ``RuntimeError: Skipping the `training_step` by returning None in distributed
  training is not supported``. The job fails, but with Lightning's message; the OOM that
  caused it is gone (it was handled), and the peer is left in the all-reduce.

In production: a hang with no error on a large job ("stuck at step 4812"), or a crash
whose message is about returning ``None``; either way the root cause is lost.

What exposes it: an OOM in the forward pass on one rank. The default search's first probes
are exactly that (``oom@lightning.forward`` at the first step, on each rank), and
``errors-surface`` plus the oracle flag the error that did not end its rank (the
manual version is reported as a hang: ``--timeout`` bounds how long that takes to see).

    chaoslight fuzz examples/catalogue/swallowed_exception.py:train_buggy
    chaoslight fuzz examples/catalogue/swallowed_exception.py:train_buggy_automatic

The fixed twin catches only what it can handle on one rank without changing the
collectives: ``LinAlgError`` gets a jittered retry and the step goes on (backward on
every rank); every other error propagates, so an OOM ends the rank by its own error and
its peer is released (a clean failure). See also ``examples/planted/swallowed_oom.py``
(``except OutOfMemoryError``, automatic) and ``examples/corpus/oom_skip.py`` (a skip that
all ranks agree on).
"""

from __future__ import annotations

from typing import Any

import torch
from _catalogue_common import FEATURES, dataset, pl, seeded
from torch.utils.data import DataLoader

HIDDEN = 4
JITTER = 1e-3


class Whitened(pl.LightningModule):
    """A regressor whose loss also rewards decorrelated hidden features (log-det)."""

    def __init__(self, manual: bool, swallow: bool) -> None:
        super().__init__()
        self.encoder = torch.nn.Linear(FEATURES, HIDDEN)
        self.head = torch.nn.Linear(HIDDEN, 1)
        self.automatic_optimization = not manual
        self.swallow = swallow

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = torch.tanh(self.encoder(x))
        return features, self.head(features)

    def loss(self, batch: Any) -> torch.Tensor:
        x, y = batch
        features, prediction = self(x)
        return torch.nn.functional.mse_loss(prediction, y) - 0.01 * log_det(features)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor | None:
        if self.swallow:
            try:
                loss = self.loss(batch)
            except RuntimeError:
                return None  # the bug: "skip bad batches" swallows every RuntimeError
        else:
            loss = self.loss(batch)
        if not self.automatic_optimization:
            optimizer: Any = self.optimizers()  # one optimizer, not a list
            optimizer.zero_grad()
            self.manual_backward(loss)
            optimizer.step()
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def log_det(features: torch.Tensor) -> torch.Tensor:
    """log det of the features' covariance; a degenerate batch gets a jittered retry."""
    centered = features - features.mean(dim=0)
    covariance = centered.T @ centered / len(features)
    try:
        factor = torch.linalg.cholesky(covariance)
    except torch.linalg.LinAlgError:  # handled here, on this rank, with the same collectives
        factor = torch.linalg.cholesky(covariance + JITTER * torch.eye(len(covariance)))
    return 2 * factor.diagonal().log().sum()


def _run(manual: bool, swallow: bool) -> None:
    fit = seeded(max_steps=4)
    fit.fit(Whitened(manual, swallow), DataLoader(dataset(128), batch_size=16))


def train_buggy() -> None:
    """Bug (manual optimization): a swallowed error skips the backward on one rank: a hang."""
    _run(manual=True, swallow=True)


def train_buggy_automatic() -> None:
    """Bug (automatic optimization): Lightning refuses the ``None``; the real error is lost."""
    _run(manual=False, swallow=True)


def train_fixed() -> None:
    """Fixed: only ``LinAlgError`` is handled (in place); everything else propagates."""
    _run(manual=True, swallow=False)
