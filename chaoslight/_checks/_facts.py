"""What each rank ran: the Lightning release and the program shape Lightning's own bugs need.

A silent framework bug (a gradient sync Lightning skips, a batch it repeats after a
resume) leaves no stack naming the installed Lightning, and its damage reads like a
program's own bug. A known issue may claim such a failure only where the rank's own
facts show the release and the shape the upstream report documents; the parent's
installation need not be the ranks' (``World(python=...)``). ``FrameworkFacts`` records
them once per fit, at ``on_train_start``, in every rank: one small observation, no
collective, nothing per step. It never fails a run; ``_verdict/_known.py`` reads it.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from chaoslight._checks._base import Check, Evidence, Violation, observe, observer_class
from chaoslight._runtime._evidence import OBSERVATION

FACTS = "framework-facts"

# Each flavour's top-level module and the distribution pip knows it by.
_DISTRIBUTIONS = {"lightning": "lightning", "pytorch_lightning": "pytorch-lightning"}


class FrameworkFacts(Check):
    """Records, in every rank, the Lightning release that runs and the program's shape
    (manual optimization, DDP's static graph, ``max_steps``, the loop progress a resume
    restored, the training loaders' batches, workers and epoch-setting samplers)."""

    name = FACTS

    def observer(self) -> Any:
        def on_train_start(self: Any, trainer: Any, module: Any) -> None:
            observe(FACTS, trainer, {**framework_facts(trainer, module), **epoch_facts(trainer)})

        return observer_class("FrameworkFactsObserver", {"on_train_start": on_train_start})()

    def judge(self, evidence: Evidence) -> list[Violation]:
        return []  # facts for the known-issue table, never a verdict of their own


def framework_facts(trainer: Any, module: Any) -> dict[str, Any]:
    """The facts of one rank's fit at its start (after a checkpoint was restored)."""
    root = type(trainer).__module__.partition(".")[0]
    progress = trainer.fit_loop.epoch_loop.batch_progress.total
    return {
        "package": _DISTRIBUTIONS.get(root, root),
        "version": str(getattr(sys.modules.get(root), "__version__", "")),
        "automatic_optimization": bool(module.automatic_optimization),
        # torch's DistributedDataParallel keeps the flag it was built with.
        "static_graph": bool(getattr(trainer.strategy.model, "static_graph", False)),
        "resumed": getattr(trainer, "ckpt_path", None) is not None,
        "global_step": int(trainer.global_step),  # the optimizer steps a resume restored
        # The restored batch progress: processed but not completed is a checkpoint
        # written inside on_train_batch_end (ModelCheckpoint(every_n_train_steps=...)).
        "processed": int(progress.processed),
        "completed": int(progress.completed),
        # Lightning 2.6's time-based val_check_interval (seconds), decided per rank by its
        # own clock; None where validation is scheduled by batches.
        "val_check_seconds": _seconds(getattr(trainer, "_val_check_time_interval", None)),
        **loader_facts(trainer),
    }


def loader_facts(trainer: Any) -> dict[str, Any]:
    """The training loaders' shape a resume depends on: their batches per epoch (None:
    unknown, or unbounded), the most worker processes any has (a multi-process iterator
    draws its first indices from the sampler when it is made), and whether a sampler of
    theirs has ``set_epoch`` (its order changes per epoch)."""
    loaders = _loaders(getattr(trainer, "train_dataloader", None))
    batches = getattr(trainer, "num_training_batches", None)
    samplers = [
        sampler
        for loader in loaders
        for sampler in (
            getattr(loader, "sampler", None),
            getattr(getattr(loader, "batch_sampler", None), "sampler", None),
        )
    ]
    return {
        "train_batches": int(batches) if isinstance(batches, int) else None,
        "train_workers": max((int(getattr(x, "num_workers", 0) or 0) for x in loaders), default=0),
        "train_set_epoch": any(callable(getattr(s, "set_epoch", None)) for s in samplers),
    }


def _loaders(found: Any) -> list[Any]:
    """The DataLoaders in what ``trainer.train_dataloader`` holds (one, a sequence or a
    mapping of them, or Lightning's CombinedLoader)."""
    flattened = getattr(found, "flattened", None)
    if isinstance(flattened, list):
        found = flattened
    if isinstance(found, dict):
        found = list(found.values())
    items = found if isinstance(found, (list, tuple)) else [found]
    return [item for item in items if hasattr(item, "num_workers")]


def _seconds(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def epoch_facts(trainer: Any) -> dict[str, Any]:
    """How the fit counts: by steps or epochs, and the epoch progress it starts from."""
    epochs = trainer.fit_loop.epoch_progress.current
    totals = trainer.fit_loop.epoch_progress.total
    return {
        # -1: the fit ends by epochs; else Lightning treats it as iteration-based.
        "max_steps": int(trainer.max_steps),
        # The epoch progress at on_train_start. Lightning counts an epoch processed
        # before on_train_epoch_end (where ModelCheckpoint saves by default) and completed
        # after; on a resume, FitLoop.on_run_start makes them equal again unless max_steps
        # is set: processed one past completed is an epoch-end checkpoint Lightning did not
        # count as finished.
        "epoch_processed": int(epochs.processed),
        "epoch_completed": int(epochs.completed),
        # The running totals of the same: Lightning up to 2.4 made the current count
        # equal on a resume and left the total one behind (an epoch never counted
        # completed: fit_loop.epoch_progress ends one short).
        "epoch_total_processed": int(totals.processed),
        "epoch_total_completed": int(totals.completed),
    }


def facts_by_rank(events: Any) -> dict[int, dict[str, Any]]:
    """Each rank's facts in one run's events (the last fit's, where a rank fitted twice)."""
    found: dict[int, dict[str, Any]] = {}
    for event in events:
        if event.kind == OBSERVATION and event.site == FACTS:
            found[event.rank] = json.loads(event.detail)
    return found
