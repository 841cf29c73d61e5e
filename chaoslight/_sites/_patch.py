"""Install/uninstall one wrapt wrapper on one attribute, removing only our own layer.

Installing records the attribute as stored, ``vars(owner).get(name, MISSING)``, and puts
a ``wrapt.FunctionWrapper`` around it (around the inherited one, when it was inherited).
Undoing looks at what the attribute holds *now*, since a third party (a user's
``monkeypatch``, a tracer, a profiler) may have patched it while we were active:

- still our wrapper: the recorded original goes back exactly (set, or deleted when it
  was inherited), so staticmethods, classmethods and inherited methods come back as
  they were;
- a wrapper of theirs on top of ours (found through the ``__wrapped__`` chain): only
  our layer is cut out of the chain, so theirs survives and now wraps the original;
- something with no reference to ours: theirs is left alone.

In every case our wrapper is disabled first, so a reference that someone still holds
(a closure calling "the old ``torch.save``") passes straight through to the original.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import wrapt

MISSING: Any = object()

Wrapper = Callable[[Any, Any, tuple[Any, ...], dict[str, Any]], Any]

# How deep to look through other wrappers for ours: chains are a few layers deep; the
# bound only stops a pathological (cyclic or endless) chain.
MAX_CHAIN = 64


class Gated:
    """Something the engine opens and closes (``_runtime/_gates.py``): its ``gate`` list's
    truth says whether calls reach our code; undone, it stays closed for good."""

    gate: list[bool]
    undone: bool

    @property
    def live(self) -> bool:
        """Installed and not undone (its gate may be closed for now)."""
        return not self.undone

    def open(self) -> None:
        if not self.gate and not self.undone:
            self.gate.append(True)

    def close(self) -> None:
        self.gate.clear()


@dataclass(eq=False)
class Patch(Gated):
    """One attribute wrapped by us: where, what was stored there, and our wrapper."""

    owner: Any
    name: str
    original: Any  # vars(owner)[name] before patching, or MISSING if it was inherited
    wrapper: Any = None  # our wrapt.FunctionWrapper
    # wrapt's ``enabled``: our wrapper runs while this list is not empty; closed, a call
    # goes straight to the wrapped function. wrapt calls an ``enabled`` that is callable on
    # every call (a Python frame per call of an armed site); a list's truth it reads in C
    # (its stubs ask for ``__bool__``, which a list's length stands for). The engine closes
    # it while none of the patch's sites can fire (``_runtime/_gates.py``); undone, it stays
    # closed for good.
    gate: list[bool] = field(default_factory=lambda: [True])
    undone: bool = False

    def undo(self) -> None:
        self.undone = True
        self.gate.clear()
        current = vars(self.owner).get(self.name, MISSING)
        if current is self.wrapper:
            self._put_back()
            return
        above = layer_above(current, self.wrapper)
        if above is not None:
            # Their wrapper wraps ours: make it wrap what ours wrapped.
            with contextlib.suppress(AttributeError, TypeError):
                above.__wrapped__ = self.wrapper.__wrapped__
        # Otherwise it was replaced outright: theirs stays, ours is already disabled.

    def _put_back(self) -> None:
        if self.original is MISSING:
            delattr(self.owner, self.name)
        else:
            setattr(self.owner, self.name, self.original)


def layer_above(outer: Any, target: Any) -> Any | None:
    """The object in ``outer``'s ``__wrapped__`` chain whose ``__wrapped__`` is ``target``."""
    seen: set[int] = set()
    node = outer
    while node is not MISSING and node is not None and len(seen) < MAX_CHAIN:
        if id(node) in seen:
            return None
        seen.add(id(node))
        inner = _wrapped_of(node)
        if inner is target:
            return node
        node = inner
    return None


def _wrapped_of(obj: Any) -> Any:
    try:
        return getattr(obj, "__wrapped__", None)
    except Exception:  # a lazy proxy or odd descriptor: not a chain we can follow
        return None


def _static_lookup(owner: Any, name: str) -> Any:
    """The attribute as stored (not bound): from the owner, or the class that defines it."""
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if name in vars(klass):
                return vars(klass)[name]
    return getattr(owner, name)


def wrap_attribute(owner: Any, name: str, wrapper: Wrapper) -> Patch:
    original = vars(owner).get(name, MISSING)
    target = original if original is not MISSING else _static_lookup(owner, name)
    patch = Patch(owner, name, original)
    patch.wrapper = wrapt.FunctionWrapper(target, wrapper, enabled=cast(Any, patch.gate))
    setattr(owner, name, patch.wrapper)
    return patch


def import_optional(module: str) -> Any | None:
    """The module if it can be imported, else None (e.g. only one Lightning flavour installed)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def resolve(path: str) -> Any | None:
    """``"pkg.module:Class"`` or ``"pkg.module"`` to the object, or None if not importable."""
    module_name, _, qualname = path.partition(":")
    obj = import_optional(module_name)
    for part in filter(None, qualname.split(".")):
        obj = getattr(obj, part, None)
    return obj
