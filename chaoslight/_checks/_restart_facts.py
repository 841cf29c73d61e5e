"""What ``restart-equivalence`` records in every rank.

Per fit (a process may fit more than once) the observer records, as small JSON facts:

- ``start`` (``on_train_start``): the global step the fit began at (past 0 after a
  resume), its epoch, how its loaders pick samples (a fixed order or one the random
  state decides; resumable mid-epoch or not), and what may make a correct program's
  schedule depend on metrics (a plateau scheduler, a callback with a ``monitor``);
- ``batch`` (``on_train_batch_start``): the batch's place (epoch, index, global step)
  and one fingerprint per sample (``row_hashes``);
- ``drew``: once, where the fit first drew a random number while it trained
  (``RandomWatch``); a fit without it draws none;
- ``lr`` (``on_before_optimizer_step``): each param group's learning rate, carried by
  the next ``batch`` fact (or one of its own at the fit's end);
- ``end`` (``on_train_end``): global step and epoch, whether a callback stopped the
  fit, the fit loop's and every callback's ``state_dict()`` (flattened: numbers as
  they are, tensors by checksum, paths by their last part), the optimizers' state key
  names and step counts, and, only when the fit drew no random number, the checksums
  of the weights.
"""

from __future__ import annotations

import math
import os
import random
import zlib
from typing import Any

from chaoslight._checks._base import observe, observer_class
from chaoslight._checks._invariants import summaries
from chaoslight._checks._shards import row_hashes, train_loaders
from chaoslight._runtime._inject import active

MAX_LEAVES = 200  # leaves of one state_dict summary: the event stays small


def torch_state() -> int:
    """One word that moves whenever torch's global generators (CPU, and CUDA once it is
    initialised) draw: their states advance and never come back. A few microseconds."""
    import torch

    word = zlib.crc32(torch.get_rng_state().numpy().tobytes())
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for state in torch.cuda.get_rng_state_all():
            word = zlib.crc32(state.numpy().tobytes(), word)
    return word


def host_state() -> int:
    """The same for numpy's and python's global generators (tens of microseconds: read
    at epoch ends only; nothing of torch's draws from them)."""
    import numpy

    state: Any = numpy.random.get_state()
    _, keys, position, *_ = state
    # python's keys only: the state's last item is None, whose hash differs by process
    return zlib.crc32(keys.tobytes()) ^ position ^ hash(random.getstate()[1])


class RandomWatch:
    """Whether a fit draws random numbers while it trains.

    torch's state is read at every step's start and end, at epoch ends and around
    validation; numpy's and python's at the fit's start and each epoch end. A change is
    allowed only where a loader's iterator is made (torch's DataLoader draws its base
    seed there): between an epoch's start and its first batch, and before validation
    starts. What that draw decides (a shuffled order, the workers' seeds) shows in the
    samples, which are compared by content. Once a draw is seen, nothing is read again."""

    def __init__(self) -> None:
        self.torch: int | None = None
        self.host: int | None = None
        self.drew = ""  # where the first draw was seen

    def reset(self) -> None:
        self.torch, self.host, self.drew = None, None, ""

    def point(self, where: str, iterator_made: bool = False, host: bool = False) -> str:
        """Read the state at ``where``; the place of a draw seen first here, else ""."""
        if self.drew:
            return ""
        word = torch_state()
        if self.torch is not None and word != self.torch and not iterator_made:
            self.drew = where
        self.torch = word
        if host:
            other = host_state()
            if self.host is not None and other != self.host:
                self.drew = self.drew or where
            self.host = other
        return self.drew


def private_generators(module: Any, loaders: list[Any]) -> bool:
    """A generator object held by the model or a dataset: its draws are invisible to the
    global state's fingerprint and restart from its seed after a restart."""
    import numpy
    import torch

    kinds = (torch.Generator, numpy.random.Generator, numpy.random.RandomState, random.Random)
    holders = list(module.modules()) if hasattr(module, "modules") else []
    for loader in loaders:
        dataset = getattr(loader, "dataset", None)
        for _ in range(4):  # a Subset around a dataset around ...
            if dataset is None:
                break
            holders.append(dataset)
            dataset = getattr(dataset, "dataset", None)
    # A plain list or tuple is a valid map-style dataset and has no ``__dict__``.
    fields = (getattr(holder, "__dict__", {}).values() for holder in holders)
    return any(isinstance(value, kinds) for values in fields for value in values)


def order_fixed(loader: Any) -> bool:
    """The loader's order cannot depend on the random state: a torch SequentialSampler or
    DistributedSampler (its order is a function of seed and epoch) under torch's own
    BatchSampler, over a map-style dataset."""
    from torch.utils.data import BatchSampler, IterableDataset, SequentialSampler
    from torch.utils.data.distributed import DistributedSampler

    if isinstance(getattr(loader, "dataset", None), IterableDataset):
        return False
    batches = getattr(loader, "batch_sampler", None)
    sampler = getattr(batches, "sampler", None) if batches is not None else loader.sampler
    if batches is not None and type(batches) is not BatchSampler:
        return False
    return type(sampler) in (SequentialSampler, DistributedSampler)


def start_facts(trainer: Any, module: Any) -> dict[str, Any]:
    """Where the fit begins and what may make its schedule legitimately differ."""
    loaders = train_loaders(trainer)
    batches = trainer.num_training_batches
    monitors = [
        type(cb).__name__
        for cb in trainer.callbacks
        if getattr(cb, "monitor", None) and not _ours(cb)
    ]
    return {
        "k": "start",
        "g": int(trainer.global_step),
        "e": int(trainer.current_epoch),
        "n": int(batches) if batches != math.inf else -1,
        "acc": int(getattr(trainer, "accumulate_grad_batches", 1) or 1),
        "resumable": all(
            hasattr(d, "state_dict") and hasattr(d, "load_state_dict") for d in loaders
        ),
        "fixed": bool(loaders) and all(order_fixed(d) for d in loaders),
        "private": private_generators(module, loaders),
        "plateau": any(
            getattr(c, "reduce_on_plateau", False) or getattr(c, "monitor", None)
            for c in getattr(trainer, "lr_scheduler_configs", [])
        ),
        "monitors": monitors,
        "timer": any(type(cb).__name__ == "Timer" for cb in trainer.callbacks),
    }


def weighed(resumed: bool) -> bool:
    """Whether this fit's weights may be compared: it resumed, or it runs with no fault
    (a reference; the last run of a restarted job, its faults spent). Other runs skip the
    checksum pass (tens of milliseconds on 10 M parameters)."""
    injection = active()
    schedule = getattr(injection.engine, "schedule", None) if injection is not None else None
    return resumed or not getattr(schedule, "faults", ())


def end_facts(trainer: Any, module: Any, weights: bool) -> dict[str, Any]:
    """What must come out the same: counters, loop and callback states, optimizer state;
    the weights' checksums when asked (a fit that drew no random number, see ``weighed``)."""
    callbacks = {}
    for cb in trainer.callbacks:
        if _ours(cb):
            continue
        try:
            callbacks[str(cb.state_key)] = {
                "leaves": flatten(cb.state_dict()),
                "metric": bool(getattr(cb, "monitor", None)),
            }
        except Exception:  # a callback whose state_dict needs what a finished fit lacks
            continue
    facts: dict[str, Any] = {
        "k": "end",
        "g": int(trainer.global_step),
        "e": int(trainer.current_epoch),
        "stop": bool(trainer.should_stop),
        "loop": flatten(trainer.fit_loop.state_dict()),
        "cb": callbacks,
        "opt": [optimizer_facts(o) for o in trainer.optimizers],
    }
    if weights:
        tensors = list(module.parameters()) + list(module.buffers())
        names = [n for n, _ in module.named_parameters()] + [n for n, _ in module.named_buffers()]
        facts["w"] = {"names": names, "sums": summaries(tensors, bits=True)}
    return facts


def optimizer_facts(optimizer: Any) -> dict[str, Any]:
    """The names of the optimizer's per-parameter state and each parameter's step count,
    read from ``optimizer.state`` (``state_dict()`` may need a collective: ZeRO)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    index = {id(param): i for i, param in enumerate(params)}
    keys: set[str] = set()
    steps = {}
    for param, per_param in optimizer.state.items():
        keys.update(str(k) for k in per_param)
        if "step" in per_param and id(param) in index:
            steps[str(index[id(param)])] = _number(per_param["step"])
    return {"keys": sorted(keys), "steps": steps, "groups": len(optimizer.param_groups)}


def flatten(value: Any, prefix: str = "", out: dict[str, Any] | None = None) -> dict[str, Any]:
    """A state_dict as ``{"a.b.0": leaf}``: numbers and bools as they are, a tensor as
    ``["t", sum, weighted sum, bits]``, a path-like string by its last part, anything
    else by its type name. At most ``MAX_LEAVES`` leaves."""
    import torch

    out = {} if out is None else out
    if len(out) >= MAX_LEAVES:
        return out
    if isinstance(value, dict):
        for key, item in value.items():
            flatten(item, f"{prefix}.{_label(key)}" if prefix else _label(key), out)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            flatten(item, f"{prefix}.{index}" if prefix else str(index), out)
    elif isinstance(value, torch.Tensor):
        if value.numel() == 1 and not value.is_complex():
            flatten(value.item(), prefix, out)
        else:
            out[prefix] = ["t", *summaries([value], bits=True)[0]]
    elif value is None or isinstance(value, (bool, int, float)):
        out[prefix] = value if not isinstance(value, float) or math.isfinite(value) else str(value)
    elif isinstance(value, str):
        out[prefix] = os.path.basename(value) if os.sep in value else value
    else:
        out[prefix] = type(value).__name__
    return out


def _label(key: Any) -> str:
    text = str(key)
    return os.path.basename(text) if os.sep in text else text


def _number(value: Any) -> float:
    return float(value.item() if hasattr(value, "item") else value)


def _ours(callback: Any) -> bool:
    """chaoslight's own observers are not the program's state."""
    return type(callback).__module__.startswith("chaoslight.")


def _seen(
    check: str,
    fit: dict[str, Any],
    watch: RandomWatch,
    trainer: Any,
    where: str,
    iterator_made: bool = False,
    host: bool = False,
) -> None:
    """Read the random state while the fit trains; record where it first drew."""
    if fit["training"] and watch.point(where, iterator_made, host):
        observe(check, trainer, {"k": "drew", "f": fit["index"], "at": where})


def _watch_hooks(check: str, fit: dict[str, Any], watch: RandomWatch) -> dict[str, Any]:
    """The hooks that only read the random state, between the steps and around validation
    (validation hooks also run in the sanity check and ``trainer.validate``: not watched)."""

    def on_train_epoch_start(self: Any, trainer: Any, module: Any) -> None:
        _seen(check, fit, watch, trainer, "an epoch's start")
        fit["opens"] = True  # the epoch's iterator is made next: it may draw its seed

    def on_train_batch_end(self: Any, trainer: Any, module: Any, *args: Any) -> None:
        _seen(check, fit, watch, trainer, "a training step")

    def on_validation_start(self: Any, trainer: Any, module: Any) -> None:
        _seen(check, fit, watch, trainer, "validation's start", iterator_made=True)

    def on_validation_batch_start(self: Any, trainer: Any, module: Any, *args: Any) -> None:
        _seen(check, fit, watch, trainer, "a validation batch")

    def on_validation_end(self: Any, trainer: Any, module: Any) -> None:
        _seen(check, fit, watch, trainer, "validation")

    def on_train_epoch_end(self: Any, trainer: Any, module: Any) -> None:
        _seen(check, fit, watch, trainer, "an epoch's end", host=True)

    return {
        "on_train_epoch_start": on_train_epoch_start,
        "on_train_batch_end": on_train_batch_end,
        "on_validation_start": on_validation_start,
        "on_validation_batch_start": on_validation_batch_start,
        "on_validation_end": on_validation_end,
        "on_train_epoch_end": on_train_epoch_end,
    }


def observer(check: str, loop_hooks: dict[str, Any]) -> Any:
    """The callback that records the facts above in each rank; in a loop that no Trainer
    runs, ``loop_hooks`` record (``_restart_loops``)."""
    cache: dict[Any, Any] = {}  # this fit's hash multipliers
    watch = RandomWatch()
    # This process's fit index; whether the fit is training; whether the next batch
    # opens an epoch; whether the fit resumed past step 0.
    fit: dict[str, Any] = {"index": -1, "training": False, "opens": False, "resumed": False}
    # Learning rates of the steps since the last batch event: they ride on the next one
    # (one event per step, not two), or go alone at the fit's end.
    rates: list[list[Any]] = []

    def on_fit_start(self: Any, trainer: Any, module: Any) -> None:
        fit.update(index=int(fit["index"]) + 1, training=False)
        watch.reset()

    def on_train_start(self: Any, trainer: Any, module: Any) -> None:
        fit.update(training=True, resumed=trainer.global_step > 0)
        _seen(check, fit, watch, trainer, "the start of training", host=True)
        observe(check, trainer, {**start_facts(trainer, module), "f": fit["index"]})

    def on_train_batch_start(self: Any, trainer: Any, module: Any, batch: Any, index: int) -> None:
        opens = bool(fit["opens"])
        _seen(check, fit, watch, trainer, "a training batch's start", iterator_made=opens)
        fit["opens"] = False
        place = {"e": int(trainer.current_epoch), "i": int(index), "g": int(trainer.global_step)}
        facts = {"k": "batch", "f": fit["index"], **place, "rows": row_hashes(batch, cache)}
        observe(check, trainer, {**facts, "lr": list(rates)})
        rates.clear()

    def on_before_optimizer_step(self: Any, trainer: Any, module: Any, optimizer: Any) -> None:
        which = next((i for i, o in enumerate(trainer.optimizers) if o is optimizer), 0)
        groups = [_number(group.get("lr", 0.0)) for group in optimizer.param_groups]
        rates.append([int(trainer.global_step), which, groups])

    def on_train_end(self: Any, trainer: Any, module: Any) -> None:
        _seen(check, fit, watch, trainer, "the end of training", host=True)
        fit["training"] = False
        if rates:
            observe(check, trainer, {"k": "lr", "f": fit["index"], "lr": list(rates)})
            rates.clear()
        weights = not watch.drew and weighed(bool(fit["resumed"]))
        observe(check, trainer, {**end_facts(trainer, module, weights), "f": fit["index"]})

    def forget(self: Any, *args: Any, **kwargs: Any) -> None:
        cache.clear()  # nothing outlives the fit
        rates.clear()
        fit["training"] = False

    hooks = {
        "on_fit_start": on_fit_start,
        "on_train_start": on_train_start,
        "on_train_batch_start": on_train_batch_start,
        "on_before_optimizer_step": on_before_optimizer_step,
        "on_train_end": on_train_end,
        "on_exception": forget,
        "teardown": forget,
        **_watch_hooks(check, fit, watch),
        **loop_hooks,
    }
    return observer_class("RestartEquivalenceObserver", hooks)()
