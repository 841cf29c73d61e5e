"""What a schedule asks of the process that runs it, checked without running anything
the schedule names.

A schedule is data: it comes from failure files, schedule files, ``CHAOSLIGHT_SCHEDULE``
and the campaign database, all of which travel between people and machines. So a
``Raise``'s ``module:QualName`` is looked up, never imported: a builtin, or a class of a
module this process has already imported (the target, in a World's rank, is imported
before its schedule's engine is built). The one import a schedule may cause is the top
of a library chaoslight patches (``TRUSTED_LIBRARIES``: ``import torch``, which every
rank does anyway); a submodule of it is looked up like any other module, since importing
one runs its code (one sets ``CUBLAS_WORKSPACE_CONFIG``), and so is each name in the
class's path (a library's lazy ``__getattr__`` imports). The class must also be built
from the schedule's arguments, so that a fault that fires never fails in chaoslight.
The parent checks the same before any rank starts (docs/explanation/trust.md).
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import sys
from typing import Any

import psutil

from chaoslight._schedule._clip import clip
from chaoslight._schedule._errors import InvalidArgument, InvalidSchedule
from chaoslight._schedule._faults import Allocate, Raise
from chaoslight._schedule._model import Schedule
from chaoslight._schedule._validate import (
    check_allocations,
    check_import_path,
    check_ranks_fit,
    is_trusted_library,
)

FIX = (
    "import it in your own code before the run (in a World: in a module the target "
    "imports), or raise a builtin, torch or Lightning exception"
)


def exception_class(name: str) -> type[BaseException]:
    """A Raise fault's exception class, by builtin name or ``module:QualName``, resolved
    among the modules already imported, importing at most a trusted library's top."""
    if ":" not in name:
        found = vars(builtins).get(name)
        if not (isinstance(found, type) and issubclass(found, BaseException)):
            raise InvalidSchedule(f"exception={name!r} is not a builtin exception")
        return found
    try:
        module_name, qualname = check_import_path("exception", name)
    except InvalidArgument as exc:
        raise InvalidSchedule(f"exception={name!r} cannot be imported: {exc}") from None
    top = module_name.partition(".")[0]
    if is_trusted_library(module_name) and top not in sys.modules:
        with contextlib.suppress(ImportError):
            importlib.import_module(top)
    module = sys.modules.get(module_name)
    if module is None:
        raise InvalidSchedule(
            f"exception={name!r} cannot be imported: a schedule imports no module and "
            f"{module_name} is not imported in this process; {FIX}"
        )
    obj: Any = module
    for part in qualname.split("."):
        # Read from the namespace, so nothing runs: a module's __getattr__ may import.
        found = getattr(obj, "__dict__", {}).get(part)
        if found is None:
            raise InvalidSchedule(
                f"exception={name!r} cannot be imported: {module_name} has no {qualname}"
            )
        obj = found
    if not (isinstance(obj, type) and issubclass(obj, BaseException)):
        raise InvalidSchedule(f"exception={name!r} is not an exception class")
    return obj


def exception_classes(schedule: Schedule) -> dict[str, type[BaseException]]:
    """Every Raise fault's exception class, by the name the schedule gives it; each built
    once from its fault's arguments, as the fault will build it."""
    classes = {}
    for fault in schedule:
        if isinstance(fault, Raise):
            classes[fault.exception] = cls = exception_class(fault.exception)
            try:
                cls(*fault.args)
            except Exception as exc:
                why = clip(f"{type(exc).__name__}: {exc}", 200, one_line=True)
                raise InvalidSchedule(
                    f"exception={fault.exception!r} cannot be raised with args="
                    f"{list(fault.args)!r} ({why}); give the arguments its constructor takes"
                ) from None
    return classes


def check_allocation_memory(schedule: Schedule, ranks: int) -> None:
    """The schedule's ``allocate`` faults fit the memory free now (see ``check_allocations``)."""
    if not any(isinstance(fault, Allocate) for fault in schedule):
        return
    available = int(psutil.virtual_memory().available)
    try:
        check_allocations(schedule.faults, schedule.memory_budget, ranks, available)
    except InvalidArgument as exc:
        raise InvalidSchedule(str(exc)) from None


def check_runnable(schedule: Schedule, ranks: int | None) -> None:
    """In the parent, before any rank starts: every exception class resolves here, the
    allocations fit this machine and the faults' ranks are ranks of a World of ``ranks``
    (None: a job whose size chaoslight does not know; allocations are then counted once),
    so a file's mistake is one line, never a run."""
    if ranks is not None:
        check_ranks_fit(schedule, ranks)
    exception_classes(schedule)
    check_allocation_memory(schedule, 1 if ranks is None else ranks)
