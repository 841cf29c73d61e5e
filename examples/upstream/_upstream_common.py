"""What the upstream programs share: the device count, the quiet CPU Trainer, synthetic
images and an atomic ``torch.save``.

Named ``_upstream_common`` (not ``_common``): a World worker imports target files with
their folder on ``sys.path``, and a second ``_common`` module (``examples/planted``) would
shadow it once both folders' programs ran in the same worker.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import TensorDataset

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]

IMAGE = (1, 8, 8)  # a tiny stand-in for MNIST's 1x28x28
CLASSES = 10


def devices() -> int:
    """Devices for the Trainer: the launcher's ``WORLD_SIZE``, else one."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def quiet_trainer(**options: Any) -> pl.Trainer:
    """A quiet CPU Trainer, DDP when there is more than one device; ``options`` override.
    Unlike the corpus's, checkpointing stays on unless a program turns it off."""
    count = devices()
    settings: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": count,
        "strategy": "ddp" if count > 1 else "auto",
        "logger": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
        "log_every_n_steps": 1,
        "default_root_dir": os.getcwd(),
    }
    settings.update(options)
    return pl.Trainer(**settings)


def synthetic_digits(n: int, seed: int) -> TensorDataset:
    """``n`` 1x8x8 "digits": one fixed random prototype per class plus noise, and labels.
    The prototypes never change (seed 1234); ``seed`` picks the samples."""
    prototypes = torch.randn(CLASSES, *IMAGE, generator=torch.Generator().manual_seed(1234))
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, CLASSES, (n,), generator=generator)
    noise = 0.5 * torch.randn(n, *IMAGE, generator=generator)
    return TensorDataset(prototypes[labels] + noise, labels)


def save_atomically(obj: Any, path: str) -> None:
    """``torch.save`` so a reader sees the whole file or none: a temporary file, flushed to
    disk, renamed over the path (``os.replace`` is atomic)."""
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    with open(path + ".tmp", "wb") as handle:
        torch.save(obj, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(path + ".tmp", path)
