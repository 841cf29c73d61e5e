"""Targets for the World tests: tiny DDP trainings (any world size), each with a habit.

Loaded by the World's workers as ``tests/world_targets.py:<name>``; ``helpers`` is
importable because a path target's folder goes on ``sys.path``.
"""

from __future__ import annotations

import os
import signal
import tempfile
from typing import Any

import torch
import torch.distributed as dist
from helpers import tiny_loader, tiny_model_class, tiny_trainer

MAX_STEPS = 4
LEFTOVER = "leftover.txt"


def _fit(model: Any = None, **options: Any) -> Any:
    model = tiny_model_class()() if model is None else model
    world = int(os.environ["WORLD_SIZE"])
    trainer = tiny_trainer(max_steps=MAX_STEPS, devices=world, strategy="ddp", **options)
    trainer.fit(model, tiny_loader())
    return model


class BatchEndLogger(tiny_model_class()):  # type: ignore[misc]
    """Logs its loss with ``sync_dist=True`` after the backward, in ``on_train_batch_end``."""

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.log("batch_loss", outputs["loss"], sync_dist=True)


def passing() -> list[float]:
    """Fit; return the final parameters."""
    return _fit().flat_params().tolist()  # type: ignore[no-any-return]


def log_at_batch_end() -> list[float]:
    """Fit a model whose only synchronised log comes after the gradient all-reduce."""
    return _fit(BatchEndLogger()).flat_params().tolist()  # type: ignore[no-any-return]


def raises_at_once() -> None:
    """Raise before any collective, in every rank."""
    raise ValueError(f"rank {os.environ['RANK']} refuses")


def unpicklable() -> Any:
    """Return something pickle cannot carry back."""
    return lambda: None


def leaves_a_mess() -> str:
    """Fit, then do what real scripts do at the end: change global state, destroy the group."""
    _fit()
    with open(LEFTOVER, "w") as handle:
        handle.write("from the last example\n")
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(2)
    torch.manual_seed(1234)
    os.environ["CHAOSLIGHT_TEST_LEFTOVER"] = "1"
    tempfile.tempdir = "/nonexistent"
    for signum in (signal.SIGTERM, signal.SIGUSR1):  # as Lightning's signal connector does
        signal.signal(signum, _leftover_handler)
    dist.destroy_process_group()
    os.chdir("/")
    return "messy"


def _leftover_handler(signum: int, frame: Any) -> None:
    """A handler an example installs and never removes."""


def _handler_name(signum: int) -> str:
    handler = signal.getsignal(signum)
    return str(getattr(handler, "__name__", handler))


def state() -> dict[str, Any]:
    """Report what a previous example might have left behind, then fit (needs the group)."""
    files = sorted(os.listdir("."))
    if dist.is_initialized():  # the ranks share the folder: all list it before any probes it
        dist.barrier()  # (tempfile.gettempdir() below writes a probe file there)
    seen = {
        "dtype": str(torch.get_default_dtype()),
        "threads": torch.get_num_threads(),
        "group": dist.is_initialized(),
        "files": files,
        "cwd_is_tmpdir": os.path.samefile(os.getcwd(), tempfile.gettempdir()),
        "env": os.environ.get("CHAOSLIGHT_TEST_LEFTOVER"),
        "world_size": os.environ.get("WORLD_SIZE"),  # Lightning's teardown deletes it
        "rand": float(torch.rand(1)),
        "handlers": [_handler_name(s) for s in (signal.SIGTERM, signal.SIGUSR1)],
        "gloo_interface": os.environ.get("GLOO_SOCKET_IFNAME"),
        "abort_dumps": _catches(signal.SIGABRT),  # faulthandler's, undone by Lightning's teardown
    }
    _fit()
    return seen


def _catches(signum: int) -> bool:
    """Whether this process has a handler for ``signum`` at the C level (/proc's SigCgt)."""
    with open("/proc/self/status") as status:
        caught = next(line for line in status if line.startswith("SigCgt:")).split()[1]
    return bool(int(caught, 16) & (1 << (signum - 1)))


def stubborn() -> None:
    """Rank 1 swallows every interruption and never returns; rank 0 waits at a barrier."""
    import contextlib
    import time

    if os.environ["RANK"] == "1":
        while True:  # the point: it will not stop by itself
            with contextlib.suppress(BaseException):
                time.sleep(10)
    dist.barrier()


def fit_twice_from_the_environment() -> list[tuple[str, int, int]]:
    """Fit twice, each Trainer built from ``WORLD_SIZE`` as read then; return, per fit, the
    cluster environment Lightning chose, the Trainer's world size and its batches."""
    seen = []
    for _ in range(2):
        trainer = tiny_trainer(
            max_steps=MAX_STEPS, devices=int(os.environ.get("WORLD_SIZE", "1")), strategy="auto"
        )
        trainer.fit(tiny_model_class()(), tiny_loader())
        environment = type(trainer.strategy.cluster_environment).__name__
        seen.append((environment, trainer.world_size, trainer.global_step))
    return seen


def leaves_a_writer_behind() -> None:
    """Start a thread that writes ``stray.txt`` (a relative path) after the example ended."""
    import threading
    import time

    def write_later() -> None:
        time.sleep(0.5)
        with open("stray.txt", "w") as stray:
            stray.write("written after the example ended\n")

    threading.Thread(target=write_later, daemon=True).start()


def leaves_a_late_writer_behind() -> int:
    """Start a thread that writes ``late.txt`` (a relative path) 3 s after the example ended,
    as an export delayed by a fault and never waited for does; return this process's pid."""
    import threading
    import time

    def write_late() -> None:
        time.sleep(3.0)
        with open("late.txt", "w") as late:
            late.write("written long after the example ended\n")

    threading.Thread(target=write_late, daemon=True).start()
    return os.getpid()


def files_after_a_while() -> list[str]:
    """The files in this example's directory after 4 s (an example's is fresh and empty)."""
    import time

    time.sleep(4.0)
    return sorted(os.listdir("."))


_RUNS_HERE: list[int] = []  # module state a later example in the same process would see


def process_identity() -> dict[str, int]:
    """What a rank's interpreter drew for itself: its string-hash seed (seen through a
    hash), numpy's global seed (seen through a draw), who started it, and how many times
    this target ran in this process."""
    import numpy

    _RUNS_HERE.append(1)
    return {
        "hash": hash("chaoslight"),
        "numpy": int(numpy.random.randint(2**31)),
        "parent": os.getppid(),
        "pid": os.getpid(),
        "runs": len(_RUNS_HERE),
    }
