"""``learned-invariants``: what held at every step of two fault-free runs must hold under
benign faults too.

The observer tracks cheap values at each training step's end (every param group's
learning rate, the step counters, every buffer's checksum, digests of the torch, CUDA,
numpy and Python RNG states, the logged metrics) and a sampled checksum of each parameter
at each epoch's end. From the two fault-free runs a campaign makes before it searches (or
two run here, for a replay), ``_learned_relations`` learns which values are equal across
ranks and which stay constant, at every step of both; a later run in which only benign
faults fired (delays, reorders on every rank) and every rank passed must keep them. Under
a benign fault only timing changes, so a broken relation is a value that depends on timing
or on the rank where the fault-free runs say it does not.

Not judged (never a violation): a fault-free run (it is a reference, or as good as one);
a run in which a hard or desync fault fired, even when every rank recovered (a correct
OOM skip changes what one rank drew from its RNG, an adaptive recovery changes buffers or
learning rates on purpose); a restarted job; a run where some rank did not pass.
"""

from __future__ import annotations

import array
import hashlib
import weakref
from pathlib import Path
from typing import Any

from chaoslight._checks._base import Check, Evidence, Violation, observe, observer_class
from chaoslight._checks._invariants import (
    ddp_modules,
    learning_rates,
    quietly,
    rates_of,
    summaries,
)
from chaoslight._checks._learned_relations import (
    AT_EPOCH,
    AT_STEP,
    CONSTANT_OVER_STEPS,
    BrokenRelation,
    LearnedRelations,
    ValueTable,
    first_broken,
    kind_of,
    learn,
)
from chaoslight._checks._reference import fault_free, note, passed_everywhere
from chaoslight._report._ridden import judged_faults
from chaoslight._runtime._events import FIRED, budget_of, parse_fired
from chaoslight._runtime._loop_steps import OptimizerParameters
from chaoslight._runtime._protocol import Rerun
from chaoslight._schedule import Severity, clip

# Elements of each parameter summed at an epoch's end: a strided sample, so that the cost
# stays far below one full pass of replicas-in-sync (which compares every element).
PARAMETER_SAMPLE = 1 << 12

# The relations learned per check, with the references learned from, beside it (the
# check object is pickled to every rank). The references themselves, not their ids: an id
# is reused once its object is freed, and another program's references may get it.
_LEARNED: weakref.WeakKeyDictionary[Any, tuple[tuple[Evidence, ...], LearnedRelations]]
_LEARNED = weakref.WeakKeyDictionary()

LEARNED_CAUSES = {
    "rng": (
        "randomness drawn from the global RNG on some ranks only, or at a moment that "
        "depends on timing (a timer, a slow-batch hook, rank-zero-only code): dropout "
        "masks and random decisions now differ between ranks and runs; give that code its "
        "own torch.Generator or random.Random"
    ),
    "lr": (
        "a learning rate set from a rank-local or timing-dependent value (a scheduler "
        "stepped on one rank, a ReduceLROnPlateau fed an unsynced metric, a deadline)"
    ),
    "counter": "a rank-local decision to skip a step or end an epoch (a timer, an unsynced value)",
    "buffer": (
        "a buffer updated on some ranks only or depending on timing (a rank-conditional "
        "update, a statistic that is not synchronised)"
    ),
    "parameter": (
        "a weight edited on some ranks only or depending on timing (a rank-conditional "
        "callback, an update outside the optimizer)"
    ),
    "metric": "a logged value computed from rank-local or timing-dependent state",
    "synced": "a metric synced on some ranks only, or logged from different code paths",
}
MOVED_CAUSE = (
    "state the fault-free runs never changed changed when only timing did: code that acts "
    "on a timer, a timeout or a polled file, or a race between threads"
)


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def _checksum(summary: list[Any]) -> str:
    """A tensor's (sum, weighted sum, bit sum) as one exact short text: sum and digest."""
    return f"sum {summary[0]:.6g} #{_digest(repr(summary).encode())}"


def rng_digests() -> dict[str, str]:
    """A digest of each global random state: torch (CPU, CUDA if started), numpy, Python."""
    import random

    import numpy
    import torch

    state = numpy.random.get_state()
    version_words = random.getstate()  # (version, 625 words, gauss_next)
    extra = repr((version_words[0], version_words[2])).encode()
    digests = {
        "rng:torch": _digest(torch.get_rng_state().numpy().tobytes()),
        "rng:numpy": _digest(state[1].tobytes() + repr(state[2:]).encode()),  # type: ignore[index]
        "rng:python": _digest(array.array("Q", version_words[1]).tobytes() + extra),
    }
    if torch.cuda.is_initialized():  # never started: no CUDA randomness drawn
        states = torch.cuda.get_rng_state_all()
        digests["rng:cuda"] = _digest(b"".join(s.numpy().tobytes() for s in states))
    return digests


def synced_names(trainer: Any) -> set[str]:
    """Names of the metrics logged with ``sync_dist=True`` (not rank-zero-only), read from
    Lightning's result collections; empty where a release keeps them elsewhere (then every
    metric is judged as unsynced, the stricter way)."""
    names: set[str] = set()
    try:
        loops = [trainer.fit_loop.epoch_loop, trainer.fit_loop.epoch_loop.val_loop]
        for loop in loops:
            for metric in (getattr(loop, "_results", None) or {}).values():
                meta = metric.meta
                if meta.sync.should and not meta.sync.rank_zero_only:
                    names |= {meta.name, meta.forked_name(True), meta.forked_name(False)}
    except (AttributeError, TypeError):
        return set()
    return names


def metric_values(trainer: Any) -> dict[str, float]:
    """Every scalar in ``trainer.callback_metrics``, named by whether it was synced."""
    synced = synced_names(trainer)
    values: dict[str, float] = {}
    for key, value in dict(trainer.callback_metrics).items():
        try:
            number = float(value.item() if hasattr(value, "item") else value)
        except (TypeError, ValueError, RuntimeError):
            continue  # not a scalar
        values[("synced:" if key in synced else "metric:") + str(key)] = number
    return values


def step_values(trainer: Any, module: Any, batch_idx: int) -> dict[str, Any]:
    """The values tracked at a training step's end."""
    values: dict[str, Any] = {f"lr:{i}": rate for i, rate in enumerate(learning_rates(trainer))}
    values |= {
        "counter:global_step": int(trainer.global_step),
        "counter:epoch": int(trainer.current_epoch),
        "counter:batch": int(batch_idx),
    }
    buffers = [(name, b) for name, b in module.named_buffers() if b is not None]
    if buffers:
        sums = summaries([b.detach() for _, b in buffers], bits=True)
        values |= {f"buffer:{n}": _checksum(s) for (n, _), s in zip(buffers, sums, strict=True)}
    # Lightning's time-based validation (``val_check_interval=timedelta(...)``) creates the
    # validation loader's iterator, which draws its base seed from the global torch RNG, at
    # a step the clock decides: a correct program's random state then follows timing.
    timed = getattr(trainer, "_val_check_time_interval", None) is not None
    return values | ({} if timed else rng_digests()) | metric_values(trainer)


def parameter_values(module: Any) -> dict[str, str]:
    """A checksum of a strided sample of each parameter (``PARAMETER_SAMPLE`` elements)."""
    named = list(module.named_parameters())
    samples = []
    for _, parameter in named:
        flat = parameter.detach().reshape(-1)
        samples.append(flat[:: max(1, flat.numel() // PARAMETER_SAMPLE)])
    sums = summaries(samples, bits=True) if samples else []
    return {f"parameter:{n}": _checksum(s) for (n, _), s in zip(named, sums, strict=True)}


def loop_step_values(optimizers: list[Any], modules: list[Any], backwards: int) -> dict[str, Any]:
    """The values tracked at a loop's step end: the learning rate of every param group of
    the optimizers stepped so far (in the order they first stepped), the backwards run,
    the buffers of the DistributedDataParallel modules and the global RNG states."""
    values: dict[str, Any] = {f"lr:{i}": rate for i, rate in enumerate(rates_of(optimizers))}
    values["counter:backwards"] = backwards
    several = len(modules) > 1
    buffers = [
        (f"{index}.{name}" if several else name, b)
        for index, module in enumerate(modules)
        for name, b in module.named_buffers()
        if b is not None
    ]
    if buffers:
        sums = summaries([b.detach() for _, b in buffers], bits=True)
        values |= {f"buffer:{n}": _checksum(s) for (n, _), s in zip(buffers, sums, strict=True)}
    return values | rng_digests()


def _loop_hooks(check: str) -> dict[str, Any]:
    """The observer's hooks in a loop no Trainer runs (Fabric, plain PyTorch): the values
    at each optimizer step's end, a parameter checksum when the loop ends; one fit (0).

    The optimizers and the DistributedDataParallel modules are kept by weak reference; the
    modules are found once, at the first optimizer step (``ddp_modules``), as
    replicas-in-sync finds them. With no Trainer there are no logged metrics or counters
    but the backwards run: the step itself is the loop's (``_runtime/_loop_steps``)."""
    state: dict[str, Any] = {"optimizers": [], "modules": None, "backwards": 0}

    def live(refs: list[Any]) -> list[Any]:
        return [item for ref in refs if (item := ref()) is not None]

    def on_loop_backward(self: Any, tensors: Any) -> None:
        state["backwards"] += 1

    def on_loop_after_optimizer_step(self: Any, optimizer: Any) -> None:
        if state["modules"] is None:
            state["modules"] = ddp_modules()
        if all(ref() is not optimizer for ref in state["optimizers"]):
            state["optimizers"].append(weakref.ref(optimizer))
        modules = [ddp.module for ddp in live(state["modules"])]
        with quietly():
            values = loop_step_values(live(state["optimizers"]), modules, state["backwards"])
        observe(check, None, {"fit": 0, "at": "step", "values": values})

    def on_loop_end(self: Any) -> None:
        optimizers = live(state["optimizers"])
        if not optimizers:
            return  # the loop never stepped: nothing trained
        with quietly():
            values = parameter_values(OptimizerParameters(optimizers))
        observe(check, None, {"fit": 0, "at": "epoch", "values": values})

    return {
        "on_loop_backward": on_loop_backward,
        "on_loop_after_optimizer_step": on_loop_after_optimizer_step,
        "on_loop_end": on_loop_end,
    }


def table_of(evidence: Evidence, check: str) -> ValueTable:
    """The run's observations as a table: point -> rank -> values (the first per rank)."""
    table: ValueTable = {}
    for event, facts in evidence.observations(check):
        stream = AT_EPOCH if facts.get("at") == "epoch" else AT_STEP
        point = (int(facts.get("fit", 0)), -1 if event.step is None else event.step, stream)
        table.setdefault(point, {}).setdefault(event.rank, facts.get("values", {}))
    return table


def benign_only(evidence: Evidence) -> bool:
    """Every fault that fired in the run is benign (vacuously, when none fired)."""
    budget = budget_of(evidence.schedule)
    if parse_fired(evidence.events).unreadable:
        return False  # a fault this version cannot read: judge nothing
    judged = judged_faults(evidence.events, evidence.ranks.values())  # a freeze ridden out: a delay
    return all(fault.fault_class(budget) == Severity.BENIGN for _, fault in judged)


def _no_rerun(*args: Any, **kwargs: Any) -> Evidence:
    """In-process there is no rerun: the references are the runs this check judged."""
    return Evidence([])


class LearnedInvariants(Check):
    """What was equal across ranks, or constant, at every step of two fault-free runs
    stays so in a run where only benign faults fired."""

    name = "learned-invariants"

    def observer(self) -> Any:
        check = self
        fits = [-1]  # steps count from 0 again in each fit of the process

        def on_fit_start(self: Any, trainer: Any, module: Any) -> None:
            fits[0] += 1

        def on_train_batch_end(
            self: Any, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int
        ) -> None:
            with quietly():
                values = step_values(trainer, module, batch_idx)
            observe(check.name, trainer, {"fit": fits[0], "at": "step", "values": values})

        def on_train_epoch_end(self: Any, trainer: Any, module: Any) -> None:
            with quietly():
                values = parameter_values(module)
            observe(check.name, trainer, {"fit": fits[0], "at": "epoch", "values": values})

        hooks = {
            "on_fit_start": on_fit_start,
            "on_train_batch_end": on_train_batch_end,
            "on_train_epoch_end": on_train_epoch_end,
            **_loop_hooks(check.name),
        }
        return observer_class("LearnedInvariantsObserver", hooks)()

    def judge(self, evidence: Evidence) -> list[Violation]:
        """In-process: judged against the fault-free runs this object saw before."""
        return self._judge(evidence, _no_rerun)

    def judge_reruns(self, evidence: Evidence, rerun: Rerun, scratch: Path) -> list[Violation]:
        return self._judge(evidence, rerun)

    def _judge(self, evidence: Evidence, rerun: Rerun) -> list[Violation]:
        if evidence.fault_free:
            note(self, evidence)  # a reference (or as good as one): never judged
            return []
        if evidence.attempts or not passed_everywhere(evidence) or not benign_only(evidence):
            return []  # a restart, a run cut short, or a fault a correct program may answer
        references = fault_free(self, evidence, rerun, 2)
        if len(references) < 2:
            return []  # never learned from one run alone
        broken = first_broken(table_of(evidence, self.name), self._learned(references))
        return [] if broken is None else [self._violation(broken, evidence)]

    def _learned(self, references: list[Evidence]) -> LearnedRelations:
        kept = _LEARNED.get(self)
        if kept is None or list(map(id, kept[0])) != list(map(id, references)):
            tables = [table_of(reference, self.name) for reference in references]
            kept = (tuple(references), learn(tables))
            _LEARNED[self] = kept
        return kept[1]

    def _violation(self, broken: BrokenRelation, evidence: Evidence) -> Violation:
        fired = list(dict.fromkeys(e.fault for e in evidence.events if e.kind == FIRED))
        faults = ", ".join(fired) if fired else f"{evidence.schedule} (no fault fired)"
        fit, step, stream = broken.point
        where = f"the end of the epoch at step {step}" if stream == AT_EPOCH else f"step {step}"
        where += f" of fit {fit + 1}" if fit else ""
        value = describe(broken.name)
        if broken.relation == CONSTANT_OVER_STEPS:
            since = broken.since[1] if broken.since is not None else step
            seen = (
                f"{value} on rank {broken.rank} = {_shown(broken.before)} at step {since}, "
                f"{_shown(broken.values[broken.rank])} at step {step}"
            )
            cause = MOVED_CAUSE
        else:
            seen = f"{value} on " + ", ".join(
                f"rank {rank} = {_shown(v)}" for rank, v in sorted(broken.values.items())
            )
            cause = LEARNED_CAUSES.get(kind_of(broken.name), "")
        message = (
            f"{value} is {broken.relation}: held in the fault-free runs at every step, broke at "
            f"{where} under {clip(faults, 300, one_line=True)}: {seen}"
        )
        return Violation(self.name, message, rank=broken.rank, step=step, cause=cause)


def describe(name: str) -> str:
    """A tracked value's name as a report reads it."""
    kind, _, label = name.partition(":")
    texts = {
        "lr": f"the learning rate of param group {label}",
        "counter": {"global_step": "trainer.global_step", "epoch": "trainer.current_epoch"}.get(
            label, "the batch index in the epoch"
        ),
        "buffer": f"buffer {label!r}",
        "rng": f"the {label} RNG state",
        "parameter": f"parameter {label!r} (sampled)",
        "metric": f"logged metric {label!r}",
        "synced": f"logged metric {label!r} (sync_dist)",
    }
    return texts.get(kind, name)


def _shown(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)
