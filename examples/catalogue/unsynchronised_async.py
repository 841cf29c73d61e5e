"""Asynchronous work consumed before it is synchronised (on a GPU: a ``non_blocking=True``
copy read before the stream is synchronised).

The GPU failure this stands for: ``y = x.to("cpu", non_blocking=True)`` from a CUDA
tensor returns at once, and the copy engine fills ``y`` later; reading ``y`` (``.item()``,
``.numpy()``, a Python ``if``) before ``torch.cuda.synchronize()`` or an event's
``wait()`` reads whatever was in the pinned buffer: zeros, or the previous step's values.
A host-to-device ``non_blocking`` copy consumed by kernels on the *same* stream is safe
(stream order); one consumed on another stream, or a device-to-host one read by the host,
is not. A print or a ``.item()`` elsewhere synchronises and hides it. **This cannot show
on a CPU**: a CPU ``to(..., non_blocking=True)`` is an ordinary copy. On a GPU run the
checks below catch its effects the same way; PyTorch's CUDA Stream Sanitizer
(``TORCH_CUDA_SANITIZER=1``) reports unsynchronised accesses between streams.

The nearest CPU-visible analogue, shown here: an asynchronous collective read before its
``wait()``. The learning rate follows the global batch size in tokens (the square-root
scaling rule for variable-length batches). Each step starts
``dist.all_reduce(tokens, async_op=True)`` early, "to overlap it with the forward pass",
and reads ``tokens`` after the forward, but before ``work.wait()``. On gloo the reduction
runs on the process group's worker thread: the read almost always sees this rank's own
count (measured here: 98 % of reads after a small forward, 1199 of 1200 read at once),
so each rank sets its own learning rate and the replicas drift apart.

In production: with NCCL the same code reads a buffer the reduction may or may not have
written yet: results that change with load, and replicas that differ.

What exposes it: on this CPU, no fault: ``replicas-in-sync`` fails in the fault-free
baseline run. A straggler in the peer's ``dist.all_reduce`` (``delay@dist.all_reduce``)
makes the lost race certain rather than likely.

    chaoslight fuzz examples/catalogue/unsynchronised_async.py:train_buggy

The fixed twin calls ``work.wait()`` before it reads ``tokens``: the all-reduce still
overlaps the forward pass.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from _catalogue_common import FEATURES, Regressor, seeded
from torch.utils.data import DataLoader, TensorDataset

BASE_LR = 0.05
REFERENCE_TOKENS = 64.0  # the token count the base learning rate was tuned for


def token_batches(n: int = 64) -> TensorDataset:
    """Samples with a length in tokens: the loss weighs each by its length."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n, FEATURES, generator=generator)
    length = torch.randint(1, 32, (n,), generator=generator).float()
    return TensorDataset(x, x.sum(dim=1, keepdim=True), length)


class TokenScaledRegressor(Regressor):
    def __init__(self, wait_first: bool) -> None:
        super().__init__(lr=BASE_LR)
        self.wait_first = wait_first

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, length = batch
        tokens = length.sum().reshape(1)
        work = dist.all_reduce(tokens, async_op=True)  # overlapped with the forward pass
        error = (self(x) - y).squeeze(1) ** 2
        loss = (error * length).sum() / length.sum()
        if self.wait_first:
            work.wait()  # the fix: tokens holds the global count from here on
        scale = (tokens.item() / REFERENCE_TOKENS) ** 0.5  # the bug: may be this rank's count
        work.wait()
        for group in self.trainer.optimizers[0].param_groups:
            group["lr"] = BASE_LR * scale
        return loss


def _run(wait_first: bool) -> None:
    fit = seeded(max_steps=6)
    fit.fit(TokenScaledRegressor(wait_first), DataLoader(token_batches(), batch_size=4))


def train_buggy() -> None:
    """Bug: the all-reduced token count is read before ``work.wait()``."""
    _run(wait_first=False)


def train_fixed() -> None:
    """Fixed: ``work.wait()`` before the read."""
    _run(wait_first=True)
