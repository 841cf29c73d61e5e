"""Mixed precision (``bf16-mixed``) changing the optimisation path: a NaN from cancellation.

Failure mode: raw features with a large offset (readings around 40, not centred) go
through a linear layer, then a hand-written batch standardisation computes the variance
in one pass, ``E[h^2] - E[h]^2``. In float32 that difference keeps about 4 significant
digits here; under ``precision="bf16-mixed"`` the linear layer's output is bfloat16 (8
bits of mantissa: one unit in the last place is 0.25 at 50, 16 at 2500), so ``E[h^2]``
and ``E[h]^2`` round to neighbouring bf16 values and their difference comes out 0 or
*negative*. ``sqrt(var + eps)`` of a negative number is NaN, and the NaN reaches the loss
and every gradient. The float32 run of the same program trains normally.

This one shows on a CPU exactly as on a GPU: Lightning's ``bf16-mixed`` on CPU runs
``torch.autocast("cpu", dtype=torch.bfloat16)``, and CPU bf16 matmuls round their
outputs to bf16 like GPU ones. (``16-mixed``, float16 with a loss scaler, is GPU-only in
Lightning; there the same code overflows at ``h^2 > 65504`` and the scaler skips steps.)

In production: "training is fine in fp32, NaN at step 0 with bf16" or, with a larger
epsilon, no NaN but a model that trains differently (the standardised features are
mostly exact zeros): the optimisation path changes with the precision flag.

What exposes it: no fault. The default check ``finite-loss`` reports the first NaN loss
(rank, step) in the fault-free baseline run.

    chaoslight fuzz examples/catalogue/bf16_numerics.py:train_buggy

The fixed twin keeps ``bf16-mixed`` and computes the statistics in float32 with the
centred two-pass formula (``h.float().var(...)``), as ``BatchNorm`` does internally.
"""

from __future__ import annotations

from typing import Any

import torch
from _catalogue_common import FEATURES, pl, seeded
from torch.utils.data import DataLoader, TensorDataset

OFFSET = 40.0  # raw readings are not centred
HIDDEN = 8
EPS = 1e-5


def readings(n: int = 64) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = OFFSET + torch.randn(n, FEATURES, generator=generator)
    return TensorDataset(x, (x - OFFSET).sum(dim=1, keepdim=True))


class Standardised(pl.LightningModule):
    """Linear, batch standardisation by hand, ReLU, linear."""

    def __init__(self, stable: bool) -> None:
        super().__init__()
        self.hidden = torch.nn.Linear(FEATURES, HIDDEN)
        self.head = torch.nn.Linear(HIDDEN, 1)
        self.stable = stable

    def standardise(self, h: torch.Tensor) -> torch.Tensor:
        if self.stable:
            h = h.float()
            mean, var = h.mean(dim=0), h.var(dim=0, unbiased=False)  # centred, in float32
        else:
            mean = h.mean(dim=0)
            var = (h * h).mean(dim=0) - mean * mean  # the bug: one pass, in h's dtype
        return (h - mean) / torch.sqrt(var + EPS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.standardise(self.hidden(x))))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self(x).float(), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _run(stable: bool) -> None:
    fit = seeded(max_steps=4, precision="bf16-mixed")
    fit.fit(Standardised(stable), DataLoader(readings(), batch_size=8))


def train_buggy() -> None:
    """Bug: a one-pass variance in bf16 goes negative: NaN loss."""
    _run(stable=False)


def train_fixed() -> None:
    """Fixed: the statistics in float32, centred (two-pass)."""
    _run(stable=True)
