"""Unseeded randomness in an augmentation: two runs with the same seed differ.

Failure mode: the collate function adds noise and random feature dropout to each batch
with NumPy's modern API, ``np.random.default_rng()``. ``seed_everything(0)`` seeds
Python's ``random``, NumPy's *legacy* global state (``np.random.seed``) and torch; a
``Generator`` made by ``default_rng()`` with no seed draws fresh entropy from the OS
every time it is built. Every run trains on different augmented batches: the "same"
experiment, same seed, same code, ends with different weights, so a regression cannot
be bisected, a flaky test cannot be replayed, and a resumed run does not continue the
run it resumes. The ranks still agree with each other (DDP averages the gradients), so
no multi-rank check notices.

In production: "I set every seed and my runs still differ"; results that move by more
than the effect being measured.

What exposes it: no fault, but a check the default search does not run, because it runs
the target twice: ``deterministic`` compares two runs of the same target and schedule and
names the first step where the weights part.

    chaoslight fuzz examples/catalogue/unseeded_augmentation.py:train_buggy --check deterministic

The fixed twin builds the NumPy generator from a seed drawn from torch's seeded RNG
(``torch.randint`` under ``seed_everything``), once per collate call, so the augmentation
is still random from batch to batch but the same in every run.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from _catalogue_common import Regressor, dataset, seeded
from torch.utils.data import DataLoader, default_collate


class NoisyCollate:
    """Collate, then add Gaussian noise and drop one feature at random (an augmentation)."""

    def __init__(self, seeded_rng: bool) -> None:
        self.seeded_rng = seeded_rng

    def __call__(self, samples: list[Any]) -> Any:
        x, y = default_collate(samples)
        rng = self.generator()
        noise = rng.normal(0.0, 0.1, size=tuple(x.shape)).astype(np.float32)
        keep = (rng.random(size=tuple(x.shape)) > 0.1).astype(np.float32)
        return x * torch.from_numpy(keep) + torch.from_numpy(noise), y

    def generator(self) -> np.random.Generator:
        if not self.seeded_rng:
            return np.random.default_rng()  # the bug: fresh OS entropy, not the seed
        return np.random.default_rng(int(torch.randint(2**31, (1,))))


def _run(seeded_rng: bool) -> None:
    fit = seeded(max_steps=6)
    loader = DataLoader(dataset(64), batch_size=4, collate_fn=NoisyCollate(seeded_rng))
    fit.fit(Regressor(), loader)


def train_buggy() -> None:
    """Bug: the augmentation's NumPy generator is unseeded."""
    _run(seeded_rng=False)


def train_fixed() -> None:
    """Fixed: the generator's seed comes from torch's seeded RNG."""
    _run(seeded_rng=True)
