"""The mark on what chaoslight raises on purpose: the injected error, the simulated OOM, the
watchdog's ``HangDetected``, whatever the signal a fault sent raised.

The oracle calls an exception whose innermost frame is chaoslight's own an **internal
error** unless it carries this mark. The mark lives on the exception object, so it
survives a re-raise, a rank's traceback formatting (the World carries it to the parent as
``ExceptionInfo.deliberate``) and any renaming of the functions that raise; an error the
program raises *from* the injected one is its own (its innermost frame is the program's).
"""

from __future__ import annotations

import contextlib
from typing import TypeVar

from chaoslight._schedule._kind import SIMULATED_OOM_MARK

_ATTRIBUTE = "__chaoslight_deliberate__"

E = TypeVar("E", bound=BaseException)


def mark(exc: E) -> E:
    """Mark ``exc`` as raised by chaoslight on purpose; returns it, for ``raise mark(...)``."""
    with contextlib.suppress(AttributeError, TypeError):  # a type that refuses attributes
        setattr(exc, _ATTRIBUTE, True)
    return exc


# What a memory budget's OOM says when torch raised it for chaoslight's CPU allocator
# (``_cpu_budget``: the exception is made in C++, where no mark can be set on it).
BUDGET_REFUSAL = f"[{SIMULATED_OOM_MARK}: MemoryBudget on rank "


def is_deliberate(exc: BaseException | None) -> bool:
    """Whether chaoslight raised ``exc`` on purpose (``mark``), or had torch raise it (a
    CPU budget's refusal)."""
    if exc is None:
        return False
    if getattr(exc, _ATTRIBUTE, False) is True:
        return True
    return type(exc).__name__ == "OutOfMemoryError" and BUDGET_REFUSAL in str(exc)
