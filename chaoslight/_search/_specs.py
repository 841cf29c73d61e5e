"""A failure file's checks: registered checks by name; a user check, which the file names
by import path, only from the classes or objects the user names (docs/explanation/trust.md).

A failure file is data: importing a module runs its code, so a spec's import path is
looked up among what the user gave, or in ``sys.modules``, and never imported. What the
user types (``--check module:Class``) is the user's own code, imported as the target is.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from chaoslight._runtime import check_from_name
from chaoslight._schedule._errors import InvalidArgument, InvalidSchedule, short_repr
from chaoslight._schedule._validate import check_import_path


def resolve_specs(
    specs: Iterable[dict[str, Any]], user_checks: Iterable[Any] = ()
) -> tuple[list[Any], list[str]]:
    """The checks to judge with, and one line for each check left out.

    A registered check is rebuilt by its name and parameters. A user check, which the
    file names by import path, is never imported from the file: a failure file is data,
    and importing a module runs its code. It is judged only when ``user_checks`` (the
    caller's own classes or objects) holds its class, built with the file's parameters,
    or an object of it, used as given; user checks the file does not name are added.
    """
    given = [_user_check(item) for item in user_checks]
    checks: list[Any] = []
    skipped: list[str] = []
    for spec in specs:
        if "import" not in spec:
            checks.append(check_from_spec(spec))
            continue
        found = [item for item in given if _names(str(spec["import"]), item)]
        if found:
            given.remove(found[0])
            checks.append(_built(found[0], spec))
        else:
            skipped.append(skip_line(spec))
    return checks + given, skipped


def check_from_spec(spec: dict[str, Any]) -> Any:
    """A registered check rebuilt from a failure file's spec, by its name and parameters.
    A spec with an import path is a user check: it is never imported (``resolve_checks``)."""
    if "import" in spec:
        raise InvalidSchedule(skip_line(spec))
    name, params = str(spec.get("name")), dict(spec.get("params") or {})
    try:
        return check_from_name(name, **params)
    except TypeError as exc:  # a parameter the check does not take
        raise InvalidSchedule(f"check {name!r}: {exc}") from None


def skip_line(spec: dict[str, Any]) -> str:
    """The one line replay says for a user check it leaves out, and how to include it."""
    path = str(spec["import"])
    name = short_repr(spec.get("name"))
    head = f"skipped check {name}: the file names it by import path {short_repr(path)}"
    try:
        check_import_path("check", path)
    except InvalidArgument:
        return f"{head}, not a Python name, and replay imports nothing a file names"
    return (
        f"{head}, and replay imports nothing a file names; to judge with it, name it yourself: "
        f"--check {path} (Python: user_checks=[{path.rpartition(':')[2]}])"
    )


def typed_checks(
    specs: Sequence[dict[str, Any]], typed: Sequence[str]
) -> tuple[list[Any], list[str]]:
    """The checks of ``chaoslight replay FILE --check ...``, and the lines for those skipped.

    ``--check NAME`` replaces the file's registered checks; ``--check module:Class`` is the
    user's own check, imported because the user typed it, built with the file's parameters
    when the file names it. A user check the file names and the user did not type is left
    out (``resolve_checks``)."""
    classes = [import_user_check(value) for value in typed if ":" in value]
    names = [value for value in typed if ":" not in value]
    if names:
        named = [{"name": name, "params": {}} for name in names]
        specs = named + [spec for spec in specs if "import" in spec]
    return resolve_specs(specs, classes)


def import_user_check(path: str) -> Any:
    """The check class at ``path`` (``module:Class``) that the user typed on the command
    line: their own code, imported as the target is. Never called with a file's text."""
    module_name, qualname = check_import_path("--check", path)
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise InvalidArgument(f"--check {path} cannot be imported: {exc}") from None
    return _user_check(obj, f"--check {path}")


def _user_check(item: Any, name: str = "user_checks") -> Any:
    """A check class, or an object with the check protocol; anything else (a function such
    as ``os.system``, a class such as ``subprocess.Popen``) is refused before it is called."""
    cls = item if isinstance(item, type) else type(item)
    if not all(callable(getattr(cls, member, None)) for member in ("observer", "judge")):
        raise InvalidArgument(
            f"{name}: {short_repr(item)} is not a check: give a class or object with name, "
            "observer() and judge(), e.g. a chaoslight.checks.Check subclass"
        )
    return item


def _class_path(item: Any) -> str:
    cls = item if isinstance(item, type) else type(item)
    return f"{cls.__module__}:{cls.__qualname__}"


def _names(path: str, item: Any) -> bool:
    """Whether ``path`` names the class of ``item``: its own module and qualname, or a
    module already imported that re-exports it (``chaoslight.checks:FiniteLoss``); looked
    up in ``sys.modules`` only, never imported."""
    cls = item if isinstance(item, type) else type(item)
    if path == _class_path(cls):
        return True
    module_name, _, qualname = path.partition(":")
    obj: Any = sys.modules.get(module_name)
    for part in qualname.split(".") if obj is not None else ():
        obj = getattr(obj, "__dict__", {}).get(part)  # no module __getattr__: it may import
    return obj is cls


def _built(item: Any, spec: dict[str, Any]) -> Any:
    """A user check the caller gave: a class built with the file's parameters (data, passed
    to code the caller named), or an object used as it is."""
    if not isinstance(item, type):
        return item
    try:
        return item(**dict(spec.get("params") or {}))
    except TypeError as exc:
        raise InvalidSchedule(f"check {_class_path(item)}: {exc}") from None


def read_spec(index: int, raw: Any) -> dict[str, Any]:
    """One check spec, its types checked; version 1 stored a bare name."""
    spec = {"name": raw, "params": {}} if isinstance(raw, str) else raw
    if not (
        isinstance(spec, dict)
        and isinstance(spec.get("name"), str)
        and isinstance(spec.get("params", {}), (dict, type(None)))
        and isinstance(spec.get("import", ""), str)
    ):
        raise InvalidSchedule(
            f"checks[{index}]={short_repr(raw)} must be a check name or an object with a "
            "'name' string, 'params' object and optional 'import' string"
        )
    return dict(spec)
