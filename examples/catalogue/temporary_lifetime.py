r"""A large temporary per step that only fits because something happens to free it: the
"printing fixes it" story.

Failure mode: each step mines hard negatives against a memory bank: a ``batch x BANK``
score matrix (4 MiB here, gigabytes in real models) is filled, its top-k indices taken,
and the matrix is dead. Except that the author keeps ``self.last_scores = scores`` for a
debug print, and the print callback drops the reference only when it prints. Printing
every step, each matrix dies before the next is made and the peak is one matrix; printing
every 4 steps, the previous step's matrix is still alive when the next one is allocated,
and the peak is two. On a device that fits one, the job runs out of memory at the first
step after a step without a print, and "adding a print fixes it".

What a CPU run can and cannot show: on a GPU there is a second reason a print moves an
out-of-memory error: ``.item()`` synchronises the device, and CUDA reports errors of
asynchronous work at the next synchronisation, so the traceback points at the print, not
at the allocation; memory freed on another stream (``record_stream``, NCCL's buffers) is
reusable only after a sync. The caching allocator and streams are not modelled on a CPU
(``docs/explanation/cpu-vs-gpu.md``). What is shown here is the lifetime half, under a
memory budget, and the late report with a deferred OOM (below). On a GPU, run the buggy
twin with ``torch.cuda.memory._record_memory_history()`` to see both score matrices
alive at the peak.

What exposes it: a memory budget (the default search draws none; an honest miss recorded
in ``CATALOGUE``). ``temporary_lifetime.txt`` gives every rank a 10 MiB device: the bank
(4 MiB) and one score matrix fit; two do not. Both ranks raise the simulated CUDA OOM at
step 2, where the step-1 matrix (no print at step 1) is still alive:

    chaoslight replay examples/catalogue/temporary_lifetime.txt \
        examples/catalogue/temporary_lifetime.py:train_buggy

To see an OOM reported late, as CUDA reports it, replay the fixed twin with
``temporary_lifetime_deferred.txt`` (``oom ... deferred=true`` at the forward of step 2):
the rank's traceback ends at the next synchronisation point after that forward (in this
run the ``.tolist()`` with which the ``replicas-in-sync`` check reads the weights; in a
job, the first ``.item()``, print or ``dist.barrier``), while the report names the site
and step where it fired. That run is a clean failure (the rank ends by its own OOM), not
a bug:

    chaoslight replay examples/catalogue/temporary_lifetime_deferred.txt \
        examples/catalogue/temporary_lifetime.py:train_fixed

The fixed twin takes the float it prints when the matrix is made and keeps no reference:
one matrix alive at a time, whatever the print interval.
"""

from __future__ import annotations

from typing import Any

import torch
from _catalogue_common import FEATURES, Regressor, dataset, pl, seeded
from torch.utils.data import DataLoader

BANK = 1 << 18  # bank rows; the bank is 4 MiB, a 4-row score matrix 4 MiB
NEGATIVES = 8
PRINT_EVERY = 4


class HardNegatives(Regressor):
    """The corpus regressor plus a margin loss against the hardest negatives of a bank."""

    def __init__(self, keep_scores: bool) -> None:
        super().__init__()
        # A plain attribute, not a buffer: DDP would broadcast a buffer every step.
        self.bank = torch.randn(BANK, FEATURES).div_(BANK**0.5)
        self.keep_scores = keep_scores
        self.last_scores: torch.Tensor | None = None
        self.last_max = 0.0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, _ = batch
        with torch.no_grad():
            scores = torch.empty(len(x), BANK)  # the large temporary
            torch.matmul(x, self.bank.T, out=scores)
            hardest = scores.topk(NEGATIVES, dim=1).indices
            if self.keep_scores:
                self.last_scores = scores  # the bug: kept alive for the debug print
            else:
                self.last_max = float(scores.max())
        del scores
        margin = (self.layer.weight @ self.bank[hardest].transpose(1, 2)).clamp(min=0).mean()
        return super().training_step(batch, batch_idx) + 0.1 * margin


class DebugPrint(pl.Callback):
    """Every ``PRINT_EVERY`` steps: the largest score, then the kept matrix is dropped."""

    def on_train_batch_end(self, trainer: Any, module: Any, *args: Any) -> None:
        if trainer.global_step % PRINT_EVERY != 1:  # prints after steps 0, 4, 8, ...
            return
        if module.last_scores is not None:
            largest = module.last_scores.max().item()
            module.last_scores = None
        else:
            largest = module.last_max
        if trainer.is_global_zero and trainer.global_step == 1:
            print(f"step {trainer.global_step - 1}: largest score {largest:.3f}")


def _run(keep_scores: bool) -> None:
    fit = seeded(max_steps=6, callbacks=[DebugPrint()])
    fit.fit(HardNegatives(keep_scores), DataLoader(dataset(64), batch_size=4))


def train_buggy() -> None:
    """Bug: the step's score matrix lives until the next debug print."""
    _run(keep_scores=True)


def train_fixed() -> None:
    """Fixed: the printed float is taken at once; no reference to the matrix is kept."""
    _run(keep_scores=False)
