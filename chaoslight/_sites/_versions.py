"""The Lightning releases chaoslight can patch, checked before its first Lightning patch.

The Lightning sites wrap private functions and read private state (``INTERNALS``). A
release that renamed or reshaped one of them would leave a site that silently never fires,
or a restart that silently does not resume. So the first time a Lightning patch point
resolves its owners in a process, every importable flavour is checked for every internal,
and a missing or reshaped one raises one line naming the package, its version, the
internal and the supported range. A release outside ``SUPPORTED`` whose internals all
match is let through: the check is on what chaoslight uses, not on the number.

``SUPPORTED`` is what ``benchmarks/compat.py`` measures (``docs/reference/compat.md``):
every smoke step passes on pytorch-lightning 2.4.0, 2.5.1, 2.5.6, 2.6.6 and lightning 2.6.6.
The internals are the same back to 2.1 and 2.3.3 passes too, but releases before 2.4
import only with setuptools < 81, and on 2.1.4 an exception on one rank leaves its DDP peer
blocked in backward (a hang). 2.0 lacks ``_ForwardRedirection`` and is refused here.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from chaoslight._schedule._errors import ChaosError
from chaoslight._sites._core import PatchPoint
from chaoslight._sites._patch import MISSING, import_optional

SUPPORTED = ">=2.4,<2.7"

# Each flavour's module and the distribution that installs it (what pip knows it by).
PACKAGES = {"lightning.pytorch": "lightning", "pytorch_lightning": "pytorch-lightning"}


class UnsupportedLightning(ChaosError, RuntimeError):
    """The installed Lightning lacks (or has reshaped) a private internal chaoslight uses."""


@dataclass(frozen=True)
class Internal:
    """One private thing of Lightning that chaoslight relies on, and what of it must hold.

    ``path`` is ``module:Qualname`` under the flavour. ``leading``: the first parameters,
    by name and in order (the wrappers read them by position); ``named``: parameters it
    must have anywhere; ``calls``: names its code uses; ``nested``: a function its code
    defines; ``fields``: dataclass fields; ``instance``: attributes of an instance built
    with no arguments. ``why`` completes "chaoslight needs it for ...".
    """

    path: str
    why: str
    leading: tuple[str, ...] = ()
    named: tuple[str, ...] = ()
    calls: tuple[str, ...] = ()
    nested: str = ""
    fields: tuple[str, ...] = ()
    instance: tuple[str, ...] = ()

    def problem(self, flavour: str) -> str | None:
        """What is wrong with this internal in ``flavour``, or None when it is as needed."""
        module_name, _, qualname = self.path.partition(":")
        name = f"{flavour}.{module_name}.{qualname}"
        obj = import_optional(f"{flavour}.{module_name}")
        if obj is None:
            return f"{flavour}.{module_name} cannot be imported"
        for part in qualname.split("."):
            obj = getattr(obj, part, MISSING)
            # An abstract method found is one inherited from an ABC: the real one is gone.
            if obj is MISSING or getattr(obj, "__isabstractmethod__", False):
                return f"{name} is missing"
        return self._signature_problem(name, obj) or self._shape_problem(name, obj)

    def _signature_problem(self, name: str, obj: Any) -> str | None:
        if not (self.leading or self.named):
            return None
        try:
            params = list(inspect.signature(obj).parameters)
        except (TypeError, ValueError):
            return f"{name} has no signature to read"
        if params[: len(self.leading)] != list(self.leading):
            return f"{name}({', '.join(params)}) does not start with ({', '.join(self.leading)})"
        missing = [p for p in self.named if p not in params]
        return f"{name} has no parameter {missing[0]!r}" if missing else None

    def _shape_problem(self, name: str, obj: Any) -> str | None:
        code = getattr(obj, "__code__", None)
        unused = [c for c in self.calls if code is None or c not in code.co_names]
        if unused:
            return f"{name} no longer calls {unused[0]}"
        consts = code.co_consts if code is not None else ()
        if self.nested and not any(getattr(c, "co_name", None) == self.nested for c in consts):
            return f"{name} no longer defines {self.nested}"
        if self.fields:
            known = dataclasses.fields(obj) if dataclasses.is_dataclass(obj) else ()
            have = {f.name for f in known}
            lost = [f for f in self.fields if f not in have]
            if lost:
                return f"{name} has no field {lost[0]!r}"
        return self._instance_problem(name, obj) if self.instance else None

    def _instance_problem(self, name: str, obj: Any) -> str | None:
        try:
            made = obj()
        except Exception as exc:  # any failure means the class is not the one we know
            return f"{name}() cannot be built ({type(exc).__name__})"
        lost = [a for a in self.instance if not hasattr(made, a)]
        return f"{name}() has no attribute {lost[0]!r}" if lost else None


def _call(name: str, why: str) -> Internal:
    """A dispatcher in ``trainer.call`` whose wrapper reads (trainer, name) by position."""
    return Internal(f"trainer.call:{name}", why, leading=("trainer", "hook_name"))


INTERNALS: tuple[Internal, ...] = (
    Internal(
        "trainer.connectors.data_connector:_DataConnector._prepare_dataloader",
        "telling data-order which loader the program gave and which Lightning made of it",
        leading=("self", "dataloader", "shuffle", "mode"),
    ),
    Internal(
        "trainer.call:_call_and_handle_interrupt",
        "tracking the running Trainer and resuming a restart",
        leading=("trainer", "trainer_fn"),
    ),
    Internal(
        "trainer.trainer:Trainer.fit",
        "resuming a restart",
        calls=("_call_and_handle_interrupt", "_fit_impl"),
    ),
    Internal("trainer.trainer:Trainer._fit_impl", "resuming a restart", named=("ckpt_path",)),
    _call("_call_strategy_hook", "the step and backward sites"),
    _call("_call_callback_hooks", "the hook sites"),
    _call("_call_lightning_module_hook", "the optimizer_step and module hook sites"),
    _call("_call_lightning_datamodule_hook", "a datamodule's setup/teardown at the hook sites"),
    Internal("core.module:LightningModule.manual_backward", "lightning.backward, manually"),
    Internal("strategies.strategy:Strategy.save_checkpoint", "lightning.save_checkpoint"),
    Internal("strategies.strategy:Strategy.load_checkpoint", "lightning.load_checkpoint"),
    Internal(
        "strategies.strategy:_ForwardRedirection.__call__",
        "lightning.forward under DDP, which calls the module through a redirection",
        nested="wrapped_forward",
    ),
    Internal("loops.fetchers:_DataFetcher.__next__", "lightning.next_batch"),
    Internal("loops.fetchers:_DataFetcher", "the step of a fetched batch", instance=("fetched",)),
    Internal("loops.fit_loop:_FitLoop.total_batch_idx", "the step of every event"),
    Internal("loops.training_epoch_loop:_TrainingEpochLoop.total_batch_idx", "the step"),
    Internal("loops.progress:_BatchProgress", "the step", fields=("total", "current")),
    Internal("loops.progress:_Progress.increment_ready", "hearing of each step as it begins"),
    Internal("loops.progress:_ReadyCompletedTracker", "the step", fields=("ready",)),
    Internal(
        "strategies.ddp:DDPStrategy._setup_model",
        "dist.gradient_allreduce",
        leading=("self", "model"),
    ),
    Internal(
        "strategies.ddp:DDPStrategy.__init__",
        "leaving a user's DDP comm hook alone",
        named=("ddp_comm_hook",),
    ),
    # The preemption report tells Lightning's SIGTERM handler by the module of its class.
    Internal(
        "trainer.connectors.signal_connector:_HandlersCompose",
        "telling Lightning's SIGTERM handler from the program's",
    ),
    Internal(
        "trainer.connectors.signal_connector:_SignalConnector._sigterm_handler_fn",
        "telling Lightning's SIGTERM handler from the program's",
    ),
)

# (flavour, version) pairs already checked in this process: the check runs once each.
_VERIFIED: set[tuple[str, str]] = set()


def require_supported() -> None:
    """Raise ``UnsupportedLightning`` if an importable Lightning lacks an internal we use."""
    for flavour, package in PACKAGES.items():
        module = import_optional(flavour)
        if module is None:
            continue
        version = str(getattr(module, "__version__", "unknown"))
        if (flavour, version) in _VERIFIED:
            continue
        for internal in INTERNALS:
            found = internal.problem(flavour)
            if found is not None:
                raise UnsupportedLightning(
                    f"{package} {version} is not supported by chaoslight: {found} (needed for "
                    f"{internal.why}); install a supported release: "
                    f"pip install '{package}{SUPPORTED}'"
                )
        _VERIFIED.add((flavour, version))


class LightningPoint(PatchPoint):
    """A patch point on Lightning: resolving its owners first checks the Lightning installed."""

    def owners(self) -> Iterator[Any]:
        require_supported()
        yield from super().owners()
