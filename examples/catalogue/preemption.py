"""Preemption done right on Lightning 2.5-2.6: a DDP job stopped by SIGTERM.

A cluster preempts a job by sending SIGTERM, then restarts it from its last
checkpoint. The notice reaches the ranks at different moments (a few hundred ms apart)
or only some of them (one node of a multi-node job).

``train_buggy`` relies on Lightning's own SIGTERM handling. No release from 2.5.1 to
2.6.x stops a DDP job together in those patterns: on 2.5.1 the signalled rank raises
``SIGTERMException`` and leaves its peers waiting in a collective (a gloo error on CPU,
a hang on NCCL: Lightning issue #20806); from 2.5.2 on, Lightning's handler calls
``dist.broadcast`` from inside the signal handler, which pairs with whatever collective
another rank is in, and the job hangs. ``chaoslight fuzz`` reports this once, under
"known issues in pytorch-lightning", with the workaround, and goes on searching.

``train_fixed`` is the workaround: once Lightning has installed its handler, the module
replaces it with one that only sets a flag (and takes over a SIGTERM Lightning's handler
took before: on 2.5.2-2.6.x that handler has already broadcast, so a SIGTERM in that
short window before ``on_train_start`` can still be Lightning's issue); at every batch
start every rank joins one MAX-reduce of the flag and, if any rank was signalled, every
rank saves a checkpoint and stops at the same step (``on_train_batch_start`` returns
-1); then the process exits with status 143 (128 + SIGTERM), so the scheduler sees a job
that did not finish and requeues it (a job that returns 0 after a preemption reports
success having stopped early). It passes with ``--strict``.

    chaoslight fuzz examples/catalogue/preemption.py:train_buggy           # known issue, exit 0
    chaoslight fuzz examples/catalogue/preemption.py:train_buggy --strict  # a failure, exit 1
    chaoslight fuzz examples/catalogue/preemption.py:train_fixed --strict  # clean, exit 0

On NCCL (GPUs) the same patterns hang where gloo on a CPU raises a transport error: the
verdict is the same, a rank left waiting for a peer that stopped alone.

With ``restarts 1`` in the schedule the fixed job is restarted after the preemption and
resumes from the snapshot it saved when it stopped, as a requeued job does.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "planted"))
from _common import LinearRegression, quiet_trainer, regression_data

MAX_STEPS = 12


class AgreedStop(LinearRegression):
    """Stops every rank at the same batch when any rank was sent SIGTERM."""

    def __init__(self) -> None:
        super().__init__()
        self.signalled = False

    def on_train_start(self) -> None:
        # Lightning installed its handler before this hook; replace it for this fit
        # (Lightning restores the original handlers when the fit ends). A SIGTERM that came
        # before this hook went to Lightning's handler: take it over, or Lightning's loops
        # raise SIGTERMException on this rank alone (and the job exits 0).
        connector = self.trainer._signal_connector
        self.signalled = connector.received_sigterm
        connector.received_sigterm = False
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.signalled = True  # nothing else in a handler: no collective, no I/O

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
        flag = torch.tensor([1.0 if self.signalled else 0.0])
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item() > 0:
            self.trainer.save_checkpoint(SNAPSHOT)  # every rank: it is a collective
            self.trainer.should_stop = True
            return -1
        return None


SNAPSHOT = "preempted.ckpt"


def _fit(make: type[LinearRegression]) -> None:
    trainer = quiet_trainer(max_steps=MAX_STEPS)  # seeds first: the model's init repeats
    model = make()
    # A restarted job (after a preemption) resumes from the snapshot it saved on SIGTERM.
    resume = SNAPSHOT if os.path.exists(SNAPSHOT) else None
    trainer.fit(model, regression_data(batches=MAX_STEPS), ckpt_path=resume)
    if getattr(model, "signalled", False) or trainer.global_step < MAX_STEPS:
        sys.exit(128 + signal.SIGTERM)  # stopped early: tell the scheduler so


def train_buggy() -> None:
    _fit(LinearRegression)


def train_fixed() -> None:
    _fit(AgreedStop)
