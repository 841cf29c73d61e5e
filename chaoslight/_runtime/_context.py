"""Where a process is: its rank, and the training step of the running Trainer."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any

from chaoslight._sites._patch import import_optional

RANK_VARIABLES = ("RANK", "SLURM_PROCID", "LOCAL_RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK")


def current_rank(environment: int | None = None) -> int:
    """torch.distributed's rank if a group is up, else the launcher's environment, else 0.

    ``environment`` is ``environment_rank()`` read earlier by a caller on a hot path:
    reading five environment variables costs microseconds on every call.
    """
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    return environment_rank() if environment is None else environment


def environment_rank() -> int:
    """The rank a launcher put in the environment (RANK, SLURM_PROCID, ...), else 0."""
    for name in RANK_VARIABLES:
        value = os.environ.get(name)
        if value is not None and value.strip().isdigit():
            return int(value)
    return 0


def step_of(trainer: Any) -> int | None:
    """The training batch index across epochs (``fit_loop.total_batch_idx``), None before any.

    Validation run after training batch N reports N; anything before the first
    training batch (setup, the sanity check) reports None.
    """
    if trainer is None:
        return None
    try:  # ``step_counter(trainer).total.ready`` spelled inline: read at every step
        ready = trainer.fit_loop.epoch_loop.batch_progress.total.ready
    except AttributeError:
        return None
    return ready - 1 if ready > 0 else None


def step_counter(trainer: Any) -> Any:
    """The training loop's batch progress of ``trainer``, whose count is the step (what
    ``step_of`` and ``step_reading`` read), or None."""
    if trainer is None:
        return None
    try:
        return trainer.fit_loop.epoch_loop.batch_progress
    except AttributeError:
        return None


def step_reading(counter: Any) -> Callable[[], Any] | None:
    """A cheap reading that changes whenever ``step_of`` may: the count of ``counter``
    (``step_counter(trainer)``), or None where there is none to read: the engine then
    reads the step itself. The engine compares it at every call of a site that cannot
    fire (``_runtime/_live.py``)."""
    total = getattr(counter, "total", None)
    return None if total is None else functools.partial(getattr, total, "ready")


def group_reading() -> Callable[[], Any]:
    """A cheap reading that changes whenever ``current_rank()`` may once its environment
    is read: the default process group (None before ``init_process_group``)."""
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    world = getattr(c10d, "_world", None)
    if world is not None and hasattr(world, "_default_pg"):
        return functools.partial(getattr, world, "_default_pg")  # what GroupMember.WORLD reads
    return _default_group


def _default_group() -> Any:
    """The default process group, read through torch's public name; None without one."""
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    return None if c10d is None else c10d.GroupMember.WORLD


def device_of(trainer: Any) -> Any:
    """The device the LightningModule lives on, or CPU when there is none."""
    module = getattr(trainer, "lightning_module", None) if trainer is not None else None
    device = getattr(module, "device", None)
    if device is not None:
        return device
    import torch

    return torch.device("cpu")


def callback_bases() -> tuple[type, ...]:
    """Both Lightning flavours' Callback classes (imports Lightning: call it lazily)."""
    # Both flavours' Callback classes, so Trainer's isinstance check passes in either.
    bases = []
    for module in ("lightning.pytorch.callbacks", "pytorch_lightning.callbacks"):
        found = import_optional(module)
        if found is not None:
            bases.append(found.Callback)
    return tuple(bases) or (object,)
