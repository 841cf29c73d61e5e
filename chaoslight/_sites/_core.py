"""The contract between sites and the runtime: the active dispatcher and site behaviours."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from chaoslight._sites._patch import Wrapper, resolve, wrap_attribute

Call = Callable[..., Any]


@dataclass(frozen=True)
class Behaviour:
    """How one site's call is skipped, poisoned or interrupted when a fault asks.

    - ``skip(args, kwargs)``: the value returned instead of doing the work (DropSync).
    - ``poison(result, args, kwargs, value)``: the result with NaN/Inf in it (Corrupt).
    - ``before_abort(wrapped, args, kwargs)``: run before a Raise/Crash/OOM aborts the
      call (``torch.save`` writes half its bytes first, undone when the run ends:
      ``_damage``).
    - ``reduce(wrapped, args, kwargs, order)``: the call with another summation order.
    - ``step_of(trainer, instance, step)``: the training step the call belongs to, when
      that is not the trainer's current step (a batch is fetched before its step begins).
    """

    skip: Callable[[tuple[Any, ...], dict[str, Any]], Any] | None = None
    poison: Callable[[Any, tuple[Any, ...], dict[str, Any], float], Any] | None = None
    before_abort: Callable[[Call, tuple[Any, ...], dict[str, Any]], None] | None = None
    reduce: Callable[[Call, tuple[Any, ...], dict[str, Any], str], Any] | None = None
    step_of: Callable[[Any, Any, int | None], int | None] | None = None


class Dispatcher(Protocol):
    """What the runtime offers the wrappers while a schedule is active."""

    armed: frozenset[str]
    faulted: frozenset[str]  # the sites the schedule puts faults at
    resume_from: str | None  # a checkpoint for a ``fit`` given no ``ckpt_path`` (a restart)
    # id() of the trainer ``saw_trainer`` was last told of while it lives, else None: a
    # wrapper that sees it again need not say so.
    trainer_id: int | None

    def call(
        self,
        site: str,
        wrapped: Call,
        instance: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        behaviour: Behaviour,
    ) -> Any: ...

    def sync_point(self) -> None: ...

    def saw_trainer(self, trainer: Any) -> None: ...

    def trainer_runs(self, trainer: Any) -> None:
        """``trainer`` enters fit, validate, test or predict: its step may jump (a resumed
        checkpoint) until its training loop next counts a batch."""

    # The sites whose faults can fire now, when the engine hears of every move of the
    # step, else None (every armed site may): a loop's points, open to move the step,
    # pass the others by (``_runtime/_gates.py``).
    watching: frozenset[str] | None
    # The engine's clock (``_runtime/_clock.py``): ``clock.counter`` is the running
    # Trainer's training-loop progress, whose count of batches is the step.
    clock: Any

    def progress_moved(self) -> None:
        """The training loop counted a batch as ready on ``clock``: the step moved."""

    @property
    def ran_a_trainer(self) -> bool:
        """A Trainer ran in this process: its steps and sites stand."""

    def training_began(self, begins: bool = True) -> None:
        """A call of a loop's training step runs (``_runtime/_loop_steps``): the step after
        one that ended begins; with ``begins`` (a backward, an optimizer step), step 0 too."""

    def step_ended(self, optimizer: Any) -> None:
        """``optimizer`` finished a step: outside a Trainer, the training step ends."""

    def tell_loop_observers(self, hook: str, *args: Any) -> None:
        """Outside a Trainer, call ``hook(*args)`` on the checks' observers that have it:
        what a loop does that no Trainer hook tells them (``_runtime/_protocol.py``)."""

    def tell_observers(self, hook: str, *args: Any) -> None:
        """Call ``hook(*args)`` on the checks' observers that have it, in a Trainer
        program too: what Lightning does that no hook of its own tells them (a loader it
        rebuilt, ``_runtime/_protocol.py``)."""

    def internal(self) -> Any:
        """A context in which chaoslight's own torch calls pass through every site."""

    def is_internal(self) -> bool:
        """True in a thread inside ``internal()``."""


class _State:
    dispatcher: Dispatcher | None = None


STATE = _State()


class Gating(enum.Enum):
    """When a patch point's gate is open, i.e. its calls reach its wrapper at all
    (``_runtime/_gates.py``): closed, a call goes to the wrapped function in C."""

    SITE = "site"  # while one of its sites can fire (or a deferred OOM waits, at a sync point)
    ALWAYS = "always"  # while a schedule is active: it tracks the trainer or the step
    # It moves a loop's step (a batch fetched, a backward): always in a loop no Trainer
    # runs, else as SITE.
    LOOP_CLOCK = "loop clock"
    # Its calls may belong to a later step than the clock's (a batch fetched ahead): while
    # one of its sites can fire at this step or one of the next ``AHEAD_STEPS``.
    AHEAD = "ahead"


@dataclass(frozen=True)
class PatchPoint:
    """One attribute to wrap on every owner that can be imported.

    ``owner_paths`` are ``module:Qualname`` (or bare module) paths; with
    ``subclasses=True`` every loaded subclass that overrides the attribute is wrapped
    too, since Lightning's strategies override some of the methods they dispatch to.
    """

    key: str
    owner_paths: tuple[str, ...]
    attribute: str
    wrapper: Wrapper
    sites: frozenset[str] = frozenset()
    subclasses: bool = False
    always: bool = False  # installed whenever a schedule is active (trainer tracking)
    sync_point: bool = False  # a deferred OOM surfaces here
    fetch: bool = False  # a batch fetched: a batch a repeat left is handed over here
    notes: dict[str, str] = field(default_factory=dict)
    gating: Gating = Gating.SITE

    def install(self) -> list[Any]:
        """Wrap the attribute on every owner that can be imported; the patches, each with
        an ``undo()``."""
        return [wrap_attribute(owner, self.attribute, self.wrapper) for owner in self.owners()]

    def owners(self) -> Iterator[Any]:
        seen: set[int] = set()
        for path in self.owner_paths:
            owner = resolve(path)
            if owner is None or id(owner) in seen:
                continue
            seen.add(id(owner))
            yield owner
            if self.subclasses and isinstance(owner, type):
                for sub in _all_subclasses(owner):
                    if self.attribute in vars(sub) and id(sub) not in seen:
                        seen.add(id(sub))
                        yield sub


def _all_subclasses(cls: type) -> list[type]:
    found: list[type] = []
    stack: list[type] = list(cls.__subclasses__())
    while stack:
        sub = stack.pop()
        found.append(sub)
        stack.extend(sub.__subclasses__())
    return found


def site_wrapper(site: str, behaviour: Behaviour = Behaviour()) -> Wrapper:
    """A wrapper for a patch point that serves exactly one site."""

    def wrapper(wrapped: Call, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        __tracebackhide__ = True
        dispatcher = STATE.dispatcher
        if dispatcher is None or site not in dispatcher.armed:
            return wrapped(*args, **kwargs)
        return dispatcher.call(site, wrapped, instance, args, kwargs, behaviour)

    return wrapper


class DroppedWork:
    """What a dropped ``async_op=True`` collective returns: already complete."""

    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def get_future(self) -> Any:
        import torch

        future: Any = torch.futures.Future()
        future.set_result(None)
        return future
