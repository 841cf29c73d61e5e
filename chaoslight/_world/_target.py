"""Targets: ``path/file.py:function`` or ``pkg.module:function``, checked and loaded.

``parse_target`` runs in the parent and checks what it can without importing user code
(the form, the file); ``load_target`` runs in a worker and imports the callable. Both
raise ``InvalidArgument`` with a one-line message that names the target.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaoslight._schedule._errors import InvalidArgument, suggest

FORMS = "'path/file.py:function' or 'package.module:function'"


@dataclass(frozen=True)
class Target:
    """A parsed target: an absolute file path or a module name, and a dotted attribute."""

    text: str
    function: str
    path: str | None = None
    module: str | None = None


def _dotted(name: str) -> bool:
    return bool(name) and all(part.isidentifier() for part in name.split("."))


def parse_target(text: Any, cwd: str | os.PathLike[str] | None = None) -> Target:
    """Check a target string's form (and its file, for the path form); resolve the path."""
    if not isinstance(text, str) or ":" not in text:
        raise InvalidArgument(f"target={text!r} must be {FORMS}")
    where, _, function = text.rpartition(":")
    if not _dotted(function):
        raise InvalidArgument(f"target={text!r}: {function!r} is not a function name; use {FORMS}")
    if where.endswith(".py") or "/" in where or os.sep in where:
        path = Path(cwd or os.getcwd(), where).expanduser()
        if not path.is_file():
            raise InvalidArgument(
                f"target={text!r}: no such file {where!r} (relative to {str(cwd or os.getcwd())!r})"
            )
        return Target(text, function, path=str(path.resolve()))
    if not _dotted(where):
        raise InvalidArgument(f"target={text!r}: {where!r} is neither a .py file nor a module name")
    return Target(text, function, module=where)


def load_target(target: Target) -> Callable[[], Any]:
    """Import the target's module (or file) and return the callable it names."""
    module = _import_file(target) if target.path is not None else _import_module(target)
    obj: Any = module
    owner = target.path or target.module
    for part in target.function.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("_")]
            raise InvalidArgument(
                f"target={target.text!r}: {owner} has no attribute {part!r}{suggest(part, names)}"
            )
        obj = getattr(obj, part)
    if not callable(obj):
        raise InvalidArgument(f"target={target.text!r}: {target.function} is not callable")
    return obj


def _import_module(target: Target) -> Any:
    name = target.module or ""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise InvalidArgument(f"target={target.text!r}: cannot import {name!r}: {exc}") from None
    except Exception as exc:
        raise InvalidArgument(
            f"target={target.text!r}: importing {name!r} raised {type(exc).__name__}: {exc}"
        ) from None


def _import_file(target: Target) -> Any:
    """Load a file as a module (cached per path), its directory on sys.path as for a script."""
    path = target.path or ""
    digest = hashlib.sha1(path.encode()).hexdigest()[:10]
    name = f"_chaoslight_target_{Path(path).stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    if not Path(path).is_file():
        raise InvalidArgument(f"target={target.text!r}: no such file {path!r}")
    folder = str(Path(path).parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InvalidArgument(f"target={target.text!r}: {path!r} cannot be loaded as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickle look the module up by name
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise InvalidArgument(
            f"target={target.text!r}: importing {path!r} raised {type(exc).__name__}: {exc}"
        ) from None
    return module
