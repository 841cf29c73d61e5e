"""``data-order`` in a loop that no Trainer runs (Lightning Fabric, plain PyTorch).

No Trainer says where an epoch begins or which loader trains, so the loop's own calls
say it: a DataLoader iterator's first batch begins a *pass* over its loader (one epoch:
the sampler's state then is the state its order was drawn from), and a loader trains
when a backward follows a batch it gave (a validation loader's batches are followed by
none). The first backward after a pass began records that pass's pipeline facts
(``_order_facts``), as a Trainer's first batch of an epoch does, so the same judge reads
both: the ranks' DistributedSamplers must cover the data between them, and one that
shuffles must draw a new order in each pass, which only ``set_epoch`` before the pass
gives: a plain ``DistributedSampler``'s is the loop's to call (a loader of Fabric's
``setup_dataloaders`` calls it itself, with the number of times it was iterated).

A loader is known across passes and ranks by its data set's type and length (a loop that
makes a new loader each epoch over an equal data set is one loader); loaders in the order
they first trained are the facts' ``fit``, their passes its ``epoch``.
"""

from __future__ import annotations

import sys
import weakref
from types import FrameType
from typing import Any

from chaoslight._checks._base import observe
from chaoslight._checks._order_facts import guarded_facts

# Fabric's loader wrapper, whose ``__iter__`` sets its sampler's epoch to the number of
# passes begun over it (``_FabricDataLoader``), by where it is defined in each namespace.
_FABRIC_WRAPPERS = {
    "lightning/fabric/wrappers.py": "lightning",
    "lightning_fabric/wrappers.py": "lightning-fabric",
}


def fabric_release(depth: int = 16) -> list[str] | None:
    """[distribution, version] of the Fabric whose loader wrapper is iterating on this
    thread's stack (the pass's first batch is fetched inside its ``__iter__``), or None."""
    frame: FrameType | None = sys._getframe(1)
    for _ in range(depth):
        if frame is None:
            return None
        code = frame.f_code
        if code.co_name == "__iter__":
            path = code.co_filename.replace("\\", "/")
            for suffix, package in _FABRIC_WRAPPERS.items():
                if path.endswith(suffix):
                    module = sys.modules.get(package.replace("-", "_"))
                    return [package, str(getattr(module, "__version__", ""))]
        frame = frame.f_back
    return None


class _Pipeline:
    """An iterator's pipeline, as ``pipeline_facts`` reads a loader's."""

    def __init__(self, iterator: Any) -> None:
        self.dataset = getattr(iterator, "_dataset", None)
        self.batch_sampler = getattr(iterator, "_index_sampler", None)
        self.sampler = None


def loader_key(iterator: Any) -> str:
    """What names an iterator's loader in every pass and on every rank."""
    dataset = getattr(iterator, "_dataset", None)
    try:
        size = str(len(dataset))  # type: ignore[arg-type]
    except TypeError:
        size = "?"
    return f"{type(dataset).__name__}[{size}]"


def _world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


class LoopPasses:
    """The loop half of ``data-order``'s observer (its hooks below)."""

    def __init__(self, check: str) -> None:
        self.check = check
        # Each live iterator's facts at its pass's first batch, until a backward follows.
        self.starts: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
        # Each live iterator's Fabric release, where Fabric's loader wrapper iterates it.
        self.fabric: weakref.WeakKeyDictionary[Any, list[str]] = weakref.WeakKeyDictionary()
        self.last: Any = None  # a weak reference to the iterator of the last batch fetched
        self.loaders: list[str] = []  # keys, in the order the loaders first trained
        self.passes: dict[str, int] = {}

    def on_loop_batch(self, batch: Any, iterator: Any) -> None:
        try:
            self.last = weakref.ref(iterator)
        except TypeError:  # an iterator that cannot be weakly referenced: not judged
            self.last = None
            return
        if getattr(iterator, "_num_yielded", 0) == 1:
            self.starts[iterator] = guarded_facts(_Pipeline(iterator))
            release = fabric_release()
            if release is not None:
                self.fabric[iterator] = release

    def on_loop_backward(self, tensors: Any) -> None:
        iterator = self.last() if self.last is not None else None
        self.last = None
        facts = self.starts.pop(iterator, None) if iterator is not None else None
        if facts is None:
            return  # not a pass's first training batch
        key = loader_key(iterator)
        if key not in self.loaders:
            self.loaders.append(key)
        epoch = self.passes.get(key, 0)
        self.passes[key] = epoch + 1
        # Negative: never a Trainer fit's number (a program may loop, then fit).
        record = {"fit": -1 - self.loaders.index(key), "epoch": epoch, "loaders": [facts]}
        release = self.fabric.pop(iterator, None)
        if release is not None:
            record["fabric"] = release  # the pass's sampler epoch is Fabric's pass count
        observe(self.check, None, {**record, "world_size": _world_size(), "loop": key})


def loop_hooks(check: str) -> dict[str, Any]:
    passes = LoopPasses(check)
    return {
        "on_loop_batch": lambda self, batch, iterator: passes.on_loop_batch(batch, iterator),
        "on_loop_backward": lambda self, tensors: passes.on_loop_backward(tensors),
    }
