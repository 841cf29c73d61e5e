"""Install/uninstall one wrapt wrapper on one attribute, restoring the exact original.

The original is recorded as ``vars(owner).get(name, MISSING)`` and put back as it was
(or deleted, when the attribute was inherited). Unwrapping via ``__wrapped__`` would
break staticmethods, classmethods and inherited methods, so it is never used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import wrapt

MISSING: Any = object()

Wrapper = Callable[[Any, Any, tuple[Any, ...], dict[str, Any]], Any]


@dataclass(frozen=True)
class Patch:
    owner: Any
    name: str
    original: Any  # vars(owner)[name] before patching, or MISSING if it was inherited

    def undo(self) -> None:
        if self.original is MISSING:
            delattr(self.owner, self.name)
        else:
            setattr(self.owner, self.name, self.original)


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
    setattr(owner, name, wrapt.FunctionWrapper(target, wrapper))
    return Patch(owner, name, original)


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
