"""Lightning patch points, for both ``lightning.pytorch`` and ``pytorch_lightning``.

Lightning's loops reach the user's code through three dispatchers in
``<pkg>.trainer.call``, always looked up as module attributes (``call._call_...``), so
wrapping those names intercepts every step, hook and callback, whichever strategy runs:

- ``_call_strategy_hook``: training/validation/test/predict_step and backward (and
  ``LightningModule.manual_backward``, which bypasses it);
- ``_call_callback_hooks``: every hook Lightning dispatches to callbacks;
- ``_call_lightning_module_hook``: optimizer_step and the module-only hooks;
- ``_call_lightning_datamodule_hook``: a LightningDataModule's setup, teardown and
  on_exception, at the same hook sites.
"""

from __future__ import annotations

import inspect
from typing import Any

from chaoslight._schedule._catalog import LIGHTNING_HOOKS, LIGHTNING_STEPS
from chaoslight._sites._batches import repeatable_fetch
from chaoslight._sites._core import STATE, Behaviour, Call, Gating, PatchPoint, site_wrapper
from chaoslight._sites._patch import Wrapper
from chaoslight._sites._tensors import poison
from chaoslight._sites._versions import LightningPoint

FLAVOURS = ("lightning.pytorch", "pytorch_lightning")

# Hooks Lightning dispatches to callbacks; the site fires there, once per hook event.
CALLBACK_HOOKS = frozenset(LIGHTNING_HOOKS) - {
    "on_validation_model_eval",
    "on_validation_model_train",
    "on_validation_model_zero_grad",
    "on_test_model_eval",
    "on_test_model_train",
    "on_predict_model_eval",
    "configure_model",
}
MODULE_ONLY_HOOKS = frozenset(LIGHTNING_HOOKS) - CALLBACK_HOOKS

RESULT_BEHAVIOUR = Behaviour(poison=lambda result, args, kwargs, value: poison(result, value))


def _batch_step(trainer: Any, fetcher: Any, step: int | None) -> int | None:
    """The training step a batch is fetched for: fetching runs ahead of the step counter.

    ``fetcher.fetched`` is the index in the epoch of the batch being fetched now, whether
    it is fetched for the current step or prefetched; validation batches keep ``step``.
    """
    loop = getattr(trainer, "fit_loop", None)
    if loop is None or getattr(loop, "_data_fetcher", None) is not fetcher:
        return step
    try:
        progress = loop.epoch_loop.batch_progress
        fetched: int = fetcher.fetched  # type: ignore[union-attr]
        return int(progress.total.ready - progress.current.ready + fetched)
    except AttributeError:
        return step


NEXT_BATCH_BEHAVIOUR = Behaviour(
    poison=lambda result, args, kwargs, value: poison(result, value), step_of=_batch_step
)

_next_batch_wrapper = repeatable_fetch(site_wrapper("lightning.next_batch", NEXT_BATCH_BEHAVIOUR))


STRATEGY_SITES = {name: f"lightning.{name}" for name in LIGHTNING_STEPS} | {
    "backward": "lightning.backward"
}
CALLBACK_SITES = {hook: f"lightning.{hook}" for hook in CALLBACK_HOOKS}
# Callbacks get on_save/on_load_checkpoint through _call_callbacks_on_*_checkpoint, not
# _call_callback_hooks: the module's call is the one dispatcher that names them.
# A LightningDataModule's hooks come through their own dispatcher (its setup runs before
# the callbacks' and the module's): they are the same hook sites.
DATAMODULE_SITES = {hook: f"lightning.{hook}" for hook in ("setup", "teardown", "on_exception")}
MODULE_SITES = {hook: f"lightning.{hook}" for hook in MODULE_ONLY_HOOKS} | {
    "optimizer_step": "lightning.optimizer_step",
    "on_save_checkpoint": "lightning.on_save_checkpoint",
    "on_load_checkpoint": "lightning.on_load_checkpoint",
}


def _dispatcher_wrapper(site_by_hook: dict[str, str], behaviour: Behaviour) -> Wrapper:
    """Wrap ``call._call_*(trainer, hook_name, ...)``: the hook name picks the site."""

    def wrapper(wrapped: Call, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        __tracebackhide__ = True
        dispatcher = STATE.dispatcher
        if dispatcher is None:
            return wrapped(*args, **kwargs)
        site = site_by_hook.get(args[1]) if len(args) > 1 else None
        if site is None or site not in dispatcher.armed:
            return wrapped(*args, **kwargs)
        if id(args[0]) != dispatcher.trainer_id:
            dispatcher.saw_trainer(args[0])
        return dispatcher.call(site, wrapped, instance, args, kwargs, behaviour)

    return wrapper


def _trainer_tracker(
    wrapped: Call, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Around fit/validate/test/predict: tell the runtime which trainer is running.

    When the runtime has a checkpoint to resume from (a restart), a ``fit`` given no
    ``ckpt_path`` of its own resumes from it, as a preempted job would.
    """
    __tracebackhide__ = True
    dispatcher = STATE.dispatcher
    if dispatcher is None or not args:
        return wrapped(*args, **kwargs)
    dispatcher.trainer_runs(args[0])
    resume = getattr(dispatcher, "resume_from", None)
    if resume and len(args) > 1 and getattr(args[1], "__name__", "") == "_fit_impl":
        args, kwargs = _with_checkpoint(args, kwargs, resume)
    return wrapped(*args, **kwargs)


def _with_checkpoint(
    args: tuple[Any, ...], kwargs: dict[str, Any], checkpoint: str
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``_call_and_handle_interrupt(trainer, _fit_impl, *fit_args)`` with ``ckpt_path`` set.

    The fit arguments are bound to ``_fit_impl``'s own signature, so the position of
    ``ckpt_path`` is read from the installed Lightning, not assumed.
    """
    fit_impl = args[1]
    try:
        bound = inspect.signature(fit_impl).bind(*args[2:], **kwargs)
    except TypeError:
        return args, kwargs  # not a signature we understand: run the fit as called
    if "ckpt_path" not in inspect.signature(fit_impl).parameters:
        raise RuntimeError(
            "chaoslight cannot resume this Lightning: its _fit_impl has no ckpt_path "
            "parameter (supported: Lightning 2.x)"
        )
    if bound.arguments.get("ckpt_path") is not None:
        return args, kwargs  # the user's own ckpt_path wins
    bound.arguments["ckpt_path"] = checkpoint
    return (*args[:2], *bound.args), dict(bound.kwargs)


_forward_site = site_wrapper("lightning.forward", RESULT_BEHAVIOUR)


def _progress_moved(
    wrapped: Call, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """A loop's progress counts a batch as ready: the training loop's is the step's clock
    (``_runtime/_context.step_of``), so the runtime hears of every step as it begins."""
    __tracebackhide__ = True
    result = wrapped(*args, **kwargs)
    dispatcher = STATE.dispatcher
    if dispatcher is not None and instance is dispatcher.clock.counter:
        dispatcher.progress_moved()
    return result


def _forward_wrapper(
    wrapped: Call, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``self(x)`` on a LightningModule, but not Lightning's forward redirection.

    Under DDP the strategy runs ``training_step`` by calling the DDP wrapper, which calls
    the module with its ``forward`` temporarily replaced by ``wrapped_forward``: that
    outer call wraps the whole step and is not the user's forward pass.
    """
    __tracebackhide__ = True
    redirected = getattr(vars(instance).get("forward"), "__name__", "") == "wrapped_forward"
    if redirected:
        return wrapped(*args, **kwargs)
    return _forward_site(wrapped, instance, args, kwargs)


def _loader_prepared(
    wrapped: Call, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Lightning's data connector readies a loader for a stage (under DDP it rebuilds it
    around a DistributedSampler): the checks' observers are told which loader the program
    gave and which one the stage draws from (``on_loader_prepared``), since no hook of
    Lightning's shows the program's own loader once it is replaced."""
    __tracebackhide__ = True
    result = wrapped(*args, **kwargs)
    dispatcher = STATE.dispatcher
    if dispatcher is not None:
        bound = _PREPARE_PARAMETERS.bind_partial(*args, **kwargs).arguments
        stage = getattr(bound.get("mode"), "dataloader_prefix", None)
        dispatcher.tell_observers("on_loader_prepared", bound.get("dataloader"), result, stage)
    return result


_PREPARE_PARAMETERS = inspect.Signature(
    [
        inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        for name in ("dataloader", "shuffle", "mode")
    ]
)


def _paths(suffix: str) -> tuple[str, ...]:
    return tuple(f"{flavour}.{suffix}" for flavour in FLAVOURS)


LIGHTNING_POINTS: tuple[PatchPoint, ...] = (
    LightningPoint(
        "lightning:trainer",
        _paths("trainer.call"),
        "_call_and_handle_interrupt",
        _trainer_tracker,
        always=True,
        gating=Gating.ALWAYS,
    ),
    LightningPoint(
        # Every batch a Lightning loop counts (the training loop's, whose count is the
        # step; the evaluation loops' pass by). Inherited from _Progress: wrapped on
        # _BatchProgress, the optimizer's progress (a _Progress too) is left alone.
        "lightning:progress",
        _paths("loops.progress:_BatchProgress"),
        "increment_ready",
        _progress_moved,
        always=True,
        gating=Gating.ALWAYS,
    ),
    LightningPoint(
        "lightning:loader_prepared",
        _paths("trainer.connectors.data_connector:_DataConnector"),
        "_prepare_dataloader",
        _loader_prepared,
        always=True,
        gating=Gating.ALWAYS,
    ),
    LightningPoint(
        "lightning:strategy_hooks",
        _paths("trainer.call"),
        "_call_strategy_hook",
        _dispatcher_wrapper(STRATEGY_SITES, RESULT_BEHAVIOUR),
        sites=frozenset(STRATEGY_SITES.values()),
    ),
    LightningPoint(
        "lightning:callback_hooks",
        _paths("trainer.call"),
        "_call_callback_hooks",
        _dispatcher_wrapper(CALLBACK_SITES, Behaviour()),
        sites=frozenset(CALLBACK_SITES.values()),
    ),
    LightningPoint(
        "lightning:module_hooks",
        _paths("trainer.call"),
        "_call_lightning_module_hook",
        _dispatcher_wrapper(MODULE_SITES, Behaviour()),
        sites=frozenset(MODULE_SITES.values()),
    ),
    LightningPoint(
        "lightning:datamodule_hooks",
        _paths("trainer.call"),
        "_call_lightning_datamodule_hook",
        _dispatcher_wrapper(DATAMODULE_SITES, Behaviour()),
        sites=frozenset(DATAMODULE_SITES.values()),
    ),
    LightningPoint(
        # nn.Module.__call__ is looked up on the type; defining it on LightningModule
        # catches self(x) on every user subclass without touching other modules.
        "lightning:forward",
        _paths("core.module:LightningModule"),
        "__call__",
        _forward_wrapper,
        sites=frozenset({"lightning.forward"}),
    ),
    LightningPoint(
        # Manual optimization's backward goes straight to strategy.backward, not through
        # _call_strategy_hook: without this point lightning.backward never fires there.
        "lightning:manual_backward",
        _paths("core.module:LightningModule"),
        "manual_backward",
        site_wrapper("lightning.backward", RESULT_BEHAVIOUR),
        sites=frozenset({"lightning.backward"}),
    ),
    LightningPoint(
        "lightning:save_checkpoint",
        _paths("strategies.strategy:Strategy"),
        "save_checkpoint",
        site_wrapper("lightning.save_checkpoint"),
        sites=frozenset({"lightning.save_checkpoint"}),
        subclasses=True,
    ),
    LightningPoint(
        "lightning:load_checkpoint",
        _paths("strategies.strategy:Strategy"),
        "load_checkpoint",
        site_wrapper("lightning.load_checkpoint"),
        sites=frozenset({"lightning.load_checkpoint"}),
        subclasses=True,
    ),
    LightningPoint(
        # The prefetching fetcher calls super().__next__(), so only the base is wrapped:
        # the site fires once per batch pulled from the dataloader.
        "lightning:next_batch",
        _paths("loops.fetchers:_DataFetcher"),
        "__next__",
        _next_batch_wrapper,
        sites=frozenset({"lightning.next_batch"}),
        gating=Gating.AHEAD,  # a batch is fetched ahead of its step (``_batch_step``)
        fetch=True,
    ),
)
