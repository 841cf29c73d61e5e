"""Exceptions raised by chaoslight itself (never the injected faults)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

from chaoslight._schedule._clip import clip


class ChaosError(Exception):
    """Base class of every error chaoslight raises about its own use."""


class InvalidArgument(ChaosError, ValueError):
    """An argument has the wrong type or value; the message names it and says the fix."""


class InvalidSchedule(InvalidArgument):
    """A schedule (object, JSON or text form) cannot be built or read."""


class InjectionActive(ChaosError, RuntimeError):
    """A second ``inject()`` was entered while one is active in this process.

    One schedule per process: a silently skipped fault would look like a pass.
    """


class CheckFailed(ChaosError, AssertionError):
    """A check found a broken invariant; ``violations`` says what, where and why."""

    def __init__(self, violations: Sequence[object]) -> None:
        self.violations = violations
        super().__init__("; ".join(str(v) for v in violations))


def suggest(name: str, choices: Iterable[str]) -> str:
    """Return a ``; did you mean ...?`` suffix naming the closest choices, or ``''``."""
    close = difflib.get_close_matches(name, list(choices), n=3, cutoff=0.5)
    if not close:
        return ""
    return "; did you mean " + " or ".join(repr(c) for c in close) + "?"


def short_repr(value: object, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters: a hostile file's megabyte stays out
    of the one-line message that quotes it."""
    return clip(repr(value), limit)
