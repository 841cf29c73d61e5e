"""Patch points of a training loop that no Trainer runs (plain PyTorch, Lightning Fabric).

Outside a Trainer nothing says which training step a call belongs to, so these points
also tell the runtime where steps begin and end (``Dispatcher.training_began`` and
``step_ended``; the rule is in ``_runtime/_loop_steps.py``): the first backward begins
training, each optimizer step ends a step, and the next batch, backward or optimizer step
begins the next.
They are installed whenever a schedule is active (``always``); in a Trainer program
Lightning's own step counter wins and the loop's is never read.

- ``torch.autograd.backward``: ``loss.backward()`` looks the function up on the module at
  every call, and Fabric's and Lightning's backward end there too;
- a DataLoader iterator's ``__next__``, defined once on ``_BaseDataLoaderIter``;
- every optimizer's ``step``: torch's own global step hooks (a pre-hook, where the site's
  faults fire before the parameters change, and a post-hook, where the step ends), which
  reach every ``torch.optim`` optimizer, whatever wraps it;
- ``torch.distributed.checkpoint.state_dict._init_optim_state``: to read or load a
  distributed optimizer state dict of an optimizer with no state yet, torch steps it once
  with zero gradients and every learning rate 0 (Fabric's and FSDP2's ``load`` and
  ``save``). That step is torch's, not the program's: it runs as chaoslight's own calls
  (``Dispatcher.internal``), so it is no training step, fires no fault, and no check sees it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from chaoslight._sites._batches import repeatable_fetch
from chaoslight._sites._core import STATE, Behaviour, Call, Gating, PatchPoint, site_wrapper
from chaoslight._sites._patch import Gated, Wrapper
from chaoslight._sites._tensors import poison


def loop_step(trainer: Any, instance: Any, step: int | None) -> int | None:
    """The step a loop site's call belongs to. Before the first backward the loop's step
    is unknown (None) to every other site; the batch fetched and the forward run for the
    first step come before it, and belong to step 0. In a Trainer program (where these
    sites are never drawn) the trainer's step stands."""
    return 0 if step is None and trainer is None else step


LOOP_BEHAVIOUR = Behaviour(step_of=loop_step)
BATCH_BEHAVIOUR = Behaviour(
    poison=lambda result, args, kwargs, value: poison(result, value), step_of=loop_step
)


def loop_site(site: str, behaviour: Behaviour, moves: bool = False) -> Wrapper:
    """A loop site's wrapper. With ``moves``, the call begins the step after one that
    ended (a batch fetched). In a Trainer program it passes straight through unless the
    schedule puts a fault there: Lightning's own sites stand for it (a watchdog watches
    those, and a report names them)."""

    def wrapper(wrapped: Call, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        __tracebackhide__ = True
        dispatcher = STATE.dispatcher
        if dispatcher is None:
            return wrapped(*args, **kwargs)
        if moves:
            dispatcher.training_began(begins=False)
        watching = dispatcher.watching
        if site not in dispatcher.armed or (watching is not None and site not in watching):
            return wrapped(*args, **kwargs)  # its point stays open only to move the step
        if dispatcher.ran_a_trainer and site not in dispatcher.faulted:
            return wrapped(*args, **kwargs)
        return dispatcher.call(site, wrapped, instance, args, kwargs, behaviour)

    return wrapper


_backward_site = loop_site("torch.backward", LOOP_BEHAVIOUR)


def _backward(wrapped: Call, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """torch.autograd.backward: training has begun; the site when it is armed."""
    __tracebackhide__ = True
    dispatcher = STATE.dispatcher
    if dispatcher is None:
        return wrapped(*args, **kwargs)
    dispatcher.training_began()
    result = _backward_site(wrapped, instance, args, kwargs)
    tensors = args[0] if args else kwargs.get("tensors")
    dispatcher.tell_loop_observers("on_loop_backward", tensors)
    return result


_fetch = repeatable_fetch(loop_site("torch.next_batch", BATCH_BEHAVIOUR, moves=True))


def _next_batch(wrapped: Call, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A DataLoader iterator's next batch: the site; then the loop's observers see it."""
    __tracebackhide__ = True
    dispatcher = STATE.dispatcher
    if dispatcher is None:
        return wrapped(*args, **kwargs)
    batch = _fetch(wrapped, instance, args, kwargs)
    dispatcher.tell_loop_observers("on_loop_batch", batch, instance)
    return batch


class HookPatch(Gated):
    """Optimizer step hooks registered with torch: undone by removing the handles. Its
    ``gate`` is a patch's: the hooks return at once while it is closed."""

    def __init__(self) -> None:
        self.handles: list[Any] = []
        self.gate = [True]
        self.undone = False

    def undo(self) -> None:
        self.undone = True
        self.gate.clear()
        for handle in self.handles:
            handle.remove()
        self.handles.clear()


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


_optimizer_site = loop_site("torch.optimizer_step", LOOP_BEHAVIOUR)


def _before_step(
    gate: list[bool], optimizer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    __tracebackhide__ = True
    if not gate:
        return
    dispatcher = STATE.dispatcher
    if dispatcher is None or dispatcher.is_internal():
        return
    dispatcher.training_began()
    _optimizer_site(_nothing, optimizer, (), {})
    dispatcher.tell_loop_observers("on_loop_before_optimizer_step", optimizer)


def _after_step(
    gate: list[bool], optimizer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    if not gate:
        return
    dispatcher = STATE.dispatcher
    if dispatcher is not None and not dispatcher.is_internal():
        dispatcher.tell_loop_observers("on_loop_after_optimizer_step", optimizer)
        dispatcher.step_ended(optimizer)


def _torch_own_step(
    wrapped: Call, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """torch's optimizer state initialisation: its step is torch's own (module docstring)."""
    __tracebackhide__ = True
    dispatcher = STATE.dispatcher
    if dispatcher is None:
        return wrapped(*args, **kwargs)
    with dispatcher.internal():
        return wrapped(*args, **kwargs)


@dataclass(frozen=True)
class OptimizerHooks(PatchPoint):
    """Not an attribute: torch's global optimizer step hooks, registered and removed."""

    def owners(self) -> Iterator[Any]:
        return iter(())

    def install(self) -> list[Any]:
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        patch = HookPatch()
        patch.handles += [
            register_optimizer_step_pre_hook(functools.partial(_before_step, patch.gate)),
            register_optimizer_step_post_hook(functools.partial(_after_step, patch.gate)),
        ]
        return [patch]


LOOP_POINTS: tuple[PatchPoint, ...] = (
    PatchPoint(
        "torch:backward",
        ("torch.autograd",),
        "backward",
        _backward,
        sites=frozenset({"torch.backward"}),
        always=True,
        gating=Gating.LOOP_CLOCK,
    ),
    OptimizerHooks(
        "torch:optimizer_step",
        ("torch.optim.optimizer",),  # what the reference names: the hooks it registers
        "register_optimizer_step_pre_hook",
        site_wrapper("torch.optimizer_step"),  # unused: the hooks call the dispatcher
        sites=frozenset({"torch.optimizer_step"}),
        always=True,
        gating=Gating.LOOP_CLOCK,
    ),
    PatchPoint(
        "torch:init_optim_state",
        ("torch.distributed.checkpoint.state_dict",),  # called by its bare name there
        "_init_optim_state",
        _torch_own_step,
        always=True,
        gating=Gating.ALWAYS,
    ),
    PatchPoint(
        # Both iterator classes inherit __next__ from the base (they override _next_data).
        "torch:next_batch",
        ("torch.utils.data.dataloader:_BaseDataLoaderIter",),
        "__next__",
        _next_batch,
        sites=frozenset({"torch.next_batch"}),
        always=True,  # a batch fetched begins the loop's next step
        gating=Gating.LOOP_CLOCK,
        fetch=True,
    ),
)
