"""Targets: ``path/file.py:function`` or ``pkg.module:function``, checked and loaded.

``parse_target`` runs in the parent and checks what it can without importing user code
(the form, the file); ``load_target`` runs in a worker and imports the callable. Both
raise ``InvalidArgument`` with a one-line message that names the target. ``own_target``
is the rule for a target read from a file (``replay``, ``soak --replay``): it runs only
when it is this project's own code (docs/explanation/trust.md).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.machinery import ModuleSpec, PathFinder
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


def own_target(file: str, target: Any, command: str, cwd: str | None = None) -> str:
    """The target ``file`` names, when it is this project's own code: a ``.py`` file, or
    a module's file, under the current directory, outside any virtual environment or
    ``site-packages``, and a module whose top-level name nothing else provides (the
    standard library, an installed package) -- found without importing anything. Any
    other target runs only when the user names it: ``command TARGET``."""
    if not target:
        raise InvalidArgument(f"{file} names no target: give one, e.g. {command} train.py:main")
    here = Path(cwd or os.getcwd()).resolve()
    why = _not_own(parse_target(target, here), here)
    if why is not None:
        raise InvalidArgument(
            f"{file} names the target {target!r}, which is not code under this directory "
            f"({why}); replay runs no code a file names: to run it, name it: {command} {target}"
        )
    return str(target)


def _not_own(target: Target, here: Path) -> str | None:
    """Why ``target`` is not this project's own code under ``here``, or None."""
    if "." in target.function:
        return f"{target.function!r} is an attribute path, which only you may name"
    module = target.module or ""
    origin = Path(target.path) if target.path is not None else _module_file(module, here)
    if origin is None:
        return f"no file of module {module!r} lies under it"
    if not origin.is_relative_to(here):
        return f"{str(origin)!r} lies outside it"
    if _installed(origin, here):
        return f"{str(origin)!r} lies in a virtual environment or site-packages"
    return None if target.module is None else _shadowed(module.partition(".")[0], here)


def _module_file(name: str, here: Path) -> Path | None:
    """The file module ``name`` has when it is looked up in ``here`` alone, or None (not
    there, or a folder with no file of its own)."""
    parts, spec = name.split("."), None
    locations: list[str] | None = [str(here)]
    for index in range(len(parts)):
        if locations is None:
            return None  # a module is not a package: it holds no submodule
        spec = PathFinder.find_spec(".".join(parts[: index + 1]), list(locations))
        if spec is None:
            return None
        locations = spec.submodule_search_locations
    if spec is None or not spec.has_location or spec.origin is None:
        return None  # a namespace package: any folder of that name is one
    return Path(spec.origin).resolve()


def _installed(origin: Path, here: Path) -> bool:
    """Whether ``origin`` lies in a virtual environment or a ``site-packages`` folder."""
    inside = origin.relative_to(here).parts
    if {"site-packages", "dist-packages"} & set(inside):
        return True
    folders = [origin.parent, *origin.parent.parents]
    return any((folder / "pyvenv.cfg").exists() for folder in folders[: len(inside)])


def _shadowed(top: str, here: Path) -> str | None:
    """Why the top-level module ``top`` found in ``here`` is not the one an import of it
    may get: the standard library's, one already imported, or an installed one."""
    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        return f"{top!r} is the name of a standard-library module"
    ours = _where(PathFinder.find_spec(top, [str(here)]))
    loaded = sys.modules.get(top)
    if loaded is not None and not _where(getattr(loaded, "__spec__", None)) <= ours:
        return f"{top!r} is already imported from elsewhere"
    others = [entry for entry in sys.path if _resolved(entry) != here]
    for spec in [PathFinder.find_spec(top, others), *_other_finders(top)]:
        elsewhere = _where(spec) - ours
        if elsewhere:
            return f"{top!r} is also importable from {str(min(elsewhere))!r}"
    return None


def _other_finders(top: str) -> Iterable[ModuleSpec | None]:
    """What the import system's other finders (an editable install's) say of ``top``:
    none imports anything to answer. The one that does (setuptools' distutils shim) and
    the path finder (asked above, without ``here``) are not asked."""
    for finder in sys.meta_path:
        if finder is PathFinder or getattr(finder, "__module__", "") == "_distutils_hack":
            continue
        try:
            yield finder.find_spec(top, None)
        except Exception:  # a finder that cannot answer for this name finds nothing
            yield None


def _where(spec: ModuleSpec | None) -> set[Path]:
    """The folders (a package) or the file (a module) a module's spec points at."""
    if spec is None:
        return set()
    if spec.submodule_search_locations:
        return {Path(p).resolve() for p in spec.submodule_search_locations if os.path.isdir(p)}
    return {Path(spec.origin).resolve()} if spec.has_location and spec.origin else set()


def _resolved(entry: str) -> Path | None:
    try:
        return Path(entry or os.curdir).resolve()
    except (OSError, RuntimeError):
        return None


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
