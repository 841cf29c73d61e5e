"""One validation module: every constructor and CLI path checks its arguments here.

Each check raises ``InvalidArgument`` with one line that names the argument, its value
and what would be accepted, e.g. ``rank=-1 must not be negative; ranks count from 0``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from chaoslight._schedule._errors import InvalidArgument, suggest


def check_int(name: str, value: Any, minimum: int, allow_none: bool = False) -> None:
    """Raise InvalidArgument unless ``value`` is an int >= minimum (or None if allowed)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        kind = "an int or None" if allow_none else "an int"
        raise InvalidArgument(f"{name}={value!r} must be {kind}, not {type(value).__name__}")
    if value < minimum:
        hint = "; ranks count from 0" if name == "rank" else ""
        hint = "; steps count from 0" if name == "step" else hint
        if minimum == 0:
            raise InvalidArgument(f"{name}={value} must not be negative{hint}")
        raise InvalidArgument(f"{name}={value} must be at least {minimum}")


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise InvalidArgument(
            f"{name}={value!r} is not one of {', '.join(choices)}{suggest(str(value), choices)}"
        )


def check_bounded_int(name: str, value: Any, minimum: int, maximum: int, why: str = "") -> int:
    """An int in ``[minimum, maximum]``; ``why`` says what the upper bound protects."""
    check_int(name, value, minimum)
    if value > maximum:
        reason = f" ({why})" if why else ""
        raise InvalidArgument(f"{name}={value} must be at most {maximum}{reason}")
    return int(value)


def check_seconds(name: str, value: Any, maximum: float | None = None) -> float:
    """A positive, finite number of seconds (and at most ``maximum`` when given)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (math.isfinite(value) and value > 0)
    ):
        raise InvalidArgument(f"{name}={value!r} must be a positive number of seconds (finite)")
    if maximum is not None and value > maximum:
        raise InvalidArgument(f"{name}={value:g} must be at most {maximum:g} seconds")
    return float(value)


def check_tolerance(name: str, value: Any) -> float:
    """A finite number that is not negative (an absolute or relative tolerance)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{name}={value!r} must be a number, not {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise InvalidArgument(f"{name}={value!r} must be a finite number, not negative")
    return float(value)


def check_ranks_fit(faults: Iterable[Any], size: int) -> None:
    """Every fault's rank is a rank of a world of ``size`` ranks."""
    for fault in faults:
        if fault.rank is not None and fault.rank >= size:
            raise InvalidArgument(
                f"{fault}: rank={fault.rank} is not a rank of World(size={size}); "
                f"ranks are 0..{size - 1}"
            )
