"""The budget's eye: a torch dispatch mode that counts every tensor storage made.

While a ``MemoryBudget`` is active, every aten op the thread that entered ``inject()``
runs (factories, ``torch.cat``, ``a @ b``, ``.repeat``, ``x.new_zeros``,
``torch.tensor(list)``, the backward's gradients, the optimizer's state) passes through
the mode. Each output storage not seen before is charged to the rank's ledger once
(views and in-place results share a storage the ledger already knows, or one made before
the budget began), and a weak reference on the storage gives its bytes back when torch
frees it. Without a budget no mode is pushed at all.

Not counted, by design: chaoslight's own calls (``Engine.internal()``); other threads (a
dispatch mode is thread-local: DataLoader worker threads, the user's own threads);
DataLoader worker processes (a worker forked by a DataLoader drops the mode; a rank
forked by Lightning's ``ddp_fork`` keeps it); storages made without a
dispatched op (``torch.from_numpy``, the CPU storages ``torch.load`` reads); storages on
another device than the model's; storages under ``min_tracked_bytes``; growth of a
storage in place (``resize_``, ``out=``); the inside of higher-order operators (only
their outputs). On CUDA, autograd runs the backward on a device thread; torch copies the
dispatch-mode stack into it with the rest of the thread-local state, so gradients count
there too (read from torch's source; not yet run on a GPU).
"""

from __future__ import annotations

import functools
import os
import sys
import weakref
from typing import Any

from chaoslight._runtime._context import current_rank
from chaoslight._runtime._engine import Engine
from chaoslight._runtime._frames import user_frame
from chaoslight._runtime._memory import format_bytes, simulated_oom

# The file that forks DataLoader workers; a process forked from elsewhere is a rank
# (Lightning's ddp_fork) and keeps its budget, with the parent's ledger as it was.
_DATALOADER = os.path.join("torch", "utils", "data", "dataloader.py")

# Modes pushed in this process: a forked DataLoader worker drops them.
_WATCHING: weakref.WeakSet[Any] = weakref.WeakSet()


def watch_allocations(engine: Engine) -> Any:
    """Push a counting dispatch mode on this thread; None, and no mode, without a budget."""
    if engine.ledger.budget is None:
        return None
    mode = _mode_class()(StorageCounter(engine))
    mode.__enter__()
    _WATCHING.add(mode)
    return mode


def stop_watching(mode: Any) -> None:
    """Stop counting and take ``mode`` off this thread's stack, wherever it is in it."""
    if mode is None:
        return
    mode.counter.stop()
    _WATCHING.discard(mode)
    _remove_from_stack(mode)


def _remove_from_stack(mode: Any) -> None:
    """Pop the modes a user pushed above ours (and left there), ours, then theirs back."""
    from torch.utils._python_dispatch import (
        _get_current_dispatch_mode_stack,
        _pop_mode,
        _push_mode,
    )

    if not any(entry is mode for entry in _get_current_dispatch_mode_stack()):
        return  # another thread's stack, or already gone: the stopped counter is inert
    above = []
    while (top := _pop_mode()) is not mode:
        above.append(top)
    _push_mode(mode)  # so that its own __exit__ restores torch's flags and pops it
    mode.__exit__(None, None, None)
    for other in reversed(above):
        _push_mode(other)


def forked_by_dataloader() -> bool:
    """In a child's at-fork handler: whether a DataLoader forked it (a worker)."""
    frame: Any = sys._getframe()  # still the forking thread's stack, down to os.fork()
    while frame is not None and not frame.f_code.co_filename.endswith(_DATALOADER):
        frame = frame.f_back
    return frame is not None


def _drop_in_forked_child() -> None:
    """In a DataLoader worker, stop counting and drop the mode (which would slow every op)."""
    if _WATCHING and forked_by_dataloader():
        for mode in list(_WATCHING):
            stop_watching(mode)


os.register_at_fork(after_in_child=_drop_in_forked_child)


@functools.cache
def _mode_class() -> type:
    """The TorchDispatchMode subclass, made on first use so that torch loads lazily."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class AllocationMode(TorchDispatchMode):
        # Higher-order operators (torch.cond, ...) run as they are; their outputs count.
        supports_higher_order_operators = True

        def __init__(self, counter: StorageCounter) -> None:
            super().__init__()
            self.counter = counter

        @classmethod
        def ignore_compile_internals(cls) -> bool:
            return True  # torch.compile traces without us; what it runs eagerly counts

        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            # Else torch wraps __torch_dispatch__ in a dynamo guard: +1 us per op, and
            # importing dynamo (about 1 s) on the first op. Compilation never sees this
            # mode (ignore_compile_internals), so there is nothing for the guard to do.
            return False

        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            __tracebackhide__ = True
            out = func(*args, **(kwargs or {}))
            self.counter.count(func, args, kwargs, out)
            return out

    AllocationMode.__qualname__ = AllocationMode.__name__
    return AllocationMode


class StorageCounter:
    """Charges each new storage an op returns to the engine's ledger, once, while it lives."""

    def __init__(self, engine: Engine) -> None:
        import torch

        budget = engine.ledger.budget
        assert budget is not None, "a StorageCounter needs a budget"
        self.engine = engine
        self.min_bytes = budget.min_tracked_bytes
        self.on = True
        self._tensor = torch.Tensor
        self._lift_fresh = torch.ops.aten.lift_fresh.default
        self._fresh: dict[Any, bool] = {}  # per op: may it return a storage of its own?
        self._live: dict[int, Any] = {}  # storage address -> weak reference, while counted

    def stop(self) -> None:
        """Count nothing more; dropping the weak references cancels their callbacks."""
        self.on = False
        self._live.clear()

    def count(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        """Charge the storages ``out`` holds that are new and at least ``min_tracked_bytes``."""
        __tracebackhide__ = True
        fresh = self._fresh.get(func)
        if fresh is None:
            fresh = self._fresh[func] = self._makes_storage(func)
        if not fresh or not self.on:
            return
        tensor = self._tensor
        outputs = out if isinstance(out, (tuple, list)) else (out,)
        for item in outputs:
            if not isinstance(item, tensor):
                continue
            try:  # nbytes first: most outputs are small, and asking for the storage costs more
                big = item.nbytes >= self.min_bytes
            except RuntimeError:  # sparse and nested tensors have no one storage to count
                continue
            if big and not self.engine.is_internal():
                self._charge(item, func, args, kwargs)

    def _makes_storage(self, func: Any) -> bool:
        """False for ops whose every output aliases an input (views, in-place, ``out=``).

        ``lift_fresh`` (how ``torch.tensor(list)`` hands over the tensor it just built) is
        annotated as an alias of its input, but that input is brand new.
        """
        schema = getattr(func, "_schema", None)
        if schema is None:
            return True  # a higher-order operator: look at what it returns
        return func is self._lift_fresh or any(r.alias_info is None for r in schema.returns)

    def _charge(self, tensor: Any, func: Any, args: Any, kwargs: Any) -> None:
        __tracebackhide__ = True
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):  # sparse, nested: no single storage
            return
        key = storage._cdata
        nbytes = storage.nbytes()
        if key in self._live or nbytes < self.min_bytes or not self._counts(tensor.device):
            return
        if func is not self._lift_fresh and key in _storages_of(self._tensor, args, kwargs):
            return  # an input's storage returned as it is: made before, or counted before
        refused = self.engine.ledger.reserve(nbytes)
        if refused is not None:
            raise self._oom(func, nbytes, *refused)
        release = functools.partial(self._freed, key, nbytes)
        self._live[key] = weakref.ref(storage, release)

    def _freed(self, key: int, nbytes: int, ref: Any) -> None:
        if self._live.get(key) is ref:  # not a newer storage at the same address
            del self._live[key]
            self.engine.ledger.give_back(nbytes)

    def _counts(self, device: Any) -> bool:
        """The budget is the memory of the device the model trains on (any, before a model)."""
        if device.type == "meta":
            return False
        trainer = self.engine.trainer
        module = getattr(trainer, "lightning_module", None) if trainer is not None else None
        training = getattr(module, "device", None)
        return training is None or device.type == training.type

    def _oom(self, func: Any, nbytes: int, used: int, limit: int) -> BaseException:
        return budget_oom(self.engine, str(func), nbytes, used, limit)


def budget_oom(
    engine: Engine, what: str, nbytes: int, used: int, limit: int, how: str = ""
) -> BaseException:
    """A budget's simulated OOM: the rank, the step, ``what`` asked and the program's line
    that asked, the request, what is used and the limit (and ``how`` it was counted)."""
    rank, step = current_rank(), engine.step()
    when = "before the first training step" if step is None else f"step {step}"
    cause = (
        f"MemoryBudget on rank {rank}, {when}: {what} at {user_line()} requested "
        f"{format_bytes(nbytes)}; {format_bytes(used)} used of the {format_bytes(limit)} "
        f"limit{f' ({how})' if how else ''}"
    )
    error: BaseException = simulated_oom(nbytes, rank, cause, used, limit)
    return error


def _storages_of(tensor_type: Any, args: Any, kwargs: Any) -> set[int]:
    """The storage addresses of the tensors among an op's arguments (one level of lists)."""
    found: set[int] = set()
    for value in (*args, *(kwargs or {}).values()):
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, tensor_type):
                try:
                    found.add(item.untyped_storage()._cdata)
                except (RuntimeError, NotImplementedError):
                    continue
    return found


def user_line() -> str:
    """``file:line in function`` of the innermost user frame (``_frames.user_frame``)."""
    frame = user_frame(sys._getframe(1))
    if frame is None:
        return "no frame outside torch, Lightning and chaoslight"
    return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
