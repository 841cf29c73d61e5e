"""Known issue Lightning#19916: a job stopped by SIGTERM exits 0, so it is never requeued.

A cluster preempts a job with SIGTERM and requeues it only if it exits non-zero (143 is
128 + SIGTERM). Lightning's SIGTERM handler sets ``trainer.received_sigterm`` and its
loops then raise ``SIGTERMException``: a ``SystemExit`` raised with no code, and Python
exits 0 for a ``SystemExit`` whose code is None. The scheduler sees a job that finished;
its training stopped at the step the notice came. Every release from 2.0.0 (which renamed
``GracefulExitException`` to ``SIGTERMException``, #16501) to 2.6.x has it; the fix
(PR #21623, ``SIGTERMException`` exits 143) is on master, in no release yet.

``train_buggy`` is a plain Lightning program relying on Lightning's SIGTERM handling:
``chaoslight fuzz`` reports it apart, under "known issue in lightning", with the
``exit-status`` check's finding ("reports success ... but stopped at step 3 of the
planned step 12"), and exits 0 unless ``--strict``. ``train_fixed`` catches the stop,
writes each rank's own snapshot (no collective on the way out) and exits 143; on a
release with the fix the buggy program passes too::

    chaoslight fuzz examples/known_issues/sigterm_exit_zero.py:train_buggy --check exit-status
    chaoslight fuzz examples/known_issues/sigterm_exit_zero.py:train_fixed --check exit-status
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "planted"))
from _common import LinearRegression, quiet_trainer, regression_data

try:
    from lightning.pytorch.utilities.exceptions import SIGTERMException
except ImportError:
    from pytorch_lightning.utilities.exceptions import SIGTERMException  # type: ignore[no-redef]

MAX_STEPS = 12
EXIT_ON_SIGTERM = 128 + 15  # what a shell reports for a process SIGTERM ended


def train_buggy() -> None:
    """Relies on Lightning: on SIGTERM ``fit`` raises SIGTERMException, and the job exits 0."""
    trainer = quiet_trainer(max_steps=MAX_STEPS)
    trainer.fit(LinearRegression(), regression_data(batches=MAX_STEPS))


def train_fixed() -> None:
    """Catches the stop, keeps this rank's state, and exits 143 so the job is requeued."""
    trainer = quiet_trainer(max_steps=MAX_STEPS)
    model = LinearRegression()
    try:
        trainer.fit(model, regression_data(batches=MAX_STEPS))
    except SIGTERMException:
        state = {"step": trainer.global_step, "model": model.state_dict()}
        torch.save(state, f"preempted-rank{trainer.global_rank}.pt")
        sys.exit(EXIT_ON_SIGTERM)
