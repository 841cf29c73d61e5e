"""Fuzzing: run Hypothesis-generated schedules on a World, shrink and replay failures."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from chaoslight._checks import ErrorsSurface, check_by_name
from chaoslight._schedule import InvalidArgument
from chaoslight._search._campaign import Campaign, Progress, Result
from chaoslight._search._failure import Failure
from chaoslight._search._property import FAIL_CLEANLY, MODES, Verdict, verdict
from chaoslight._search._strategies import schedules
from chaoslight._world import World
from chaoslight._world._target import parse_target

__all__ = ["Campaign", "Failure", "Progress", "Result", "Verdict", "fuzz", "replay", "verdict"]


def _checks(names: Iterable[str], mode: str | None) -> list[Any]:
    checks = [check_by_name(name) for name in names]
    if mode == FAIL_CLEANLY and not any(isinstance(c, ErrorsSurface) for c in checks):
        checks.append(ErrorsSurface())
    return checks


class _Quiet:
    """The progress display of a campaign run from Python: shows nothing."""

    def __enter__(self) -> _Quiet:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, progress: Any) -> None:
        return None


def _positive(name: str, value: Any, minimum: float = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
        raise InvalidArgument(f"{name}={value!r} must be at least {minimum:g}")


def fuzz(
    target: str,
    *,
    world_size: int = 2,
    max_examples: int = 100,
    kinds: Sequence[str] | None = None,
    sites: Sequence[str] | None = None,
    steps: int = 4,
    max_faults: int = 3,
    seed: int | None = None,
    timeout: float = 20.0,
    checks: Sequence[str] = (),
    mode: str | None = "survive",
    replays: int = 3,
    database: str | None = None,
    display: Any = None,
) -> tuple[Result, Failure | None]:
    """Search schedules that make ``target`` fail on a World of ``world_size`` ranks."""
    if mode is not None and mode not in MODES:
        raise InvalidArgument(f"mode={mode!r} must be one of {', '.join(MODES)}")
    for name, value, low in (
        ("world_size", world_size, 1),
        ("max_examples", max_examples, 1),
        ("timeout", timeout, 0.1),
        ("replays", replays, 0),
    ):
        _positive(name, value, low)
    parse_target(target)
    strategy = schedules(
        world_size=world_size,
        steps=steps,
        sites=sites,
        faults=kinds,
        mode=mode,
        max_faults=max_faults,
    )
    check_objects = _checks(checks, mode)
    effective_mode = mode or "survive"
    display = display or _Quiet()
    with World(size=world_size) as world, display:

        def run(schedule: Any) -> tuple[Verdict, Any]:
            outcome = world.run(target, schedule, timeout=timeout, checks=check_objects)
            return verdict(outcome, list(outcome.violations), effective_mode), outcome

        key = f"{target}|{effective_mode}|{world_size}|{sorted(checks)}"
        result = Campaign(
            run, strategy, max_examples, seed, database, key, replays, on_progress=display.update
        ).execute()
    if result.schedule is None or result.verdict is None:
        return result, None
    failure = Failure(
        result.schedule,
        target,
        world_size,
        timeout,
        tuple(c.name for c in check_objects),
        effective_mode,
        result.verdict.reason,
    )
    return result, failure


def replay(
    failure: Failure,
    *,
    target: str | None = None,
    world_size: int | None = None,
    timeout: float | None = None,
    checks: Sequence[str] | None = None,
) -> tuple[Verdict, Any]:
    """Run a failure's schedule once more; the verdict says whether it still fails."""
    size = world_size or failure.world_size
    check_objects = _checks(failure.checks if checks is None else checks, failure.mode)
    with World(size=size) as world:
        outcome = world.run(
            target or failure.target,
            failure.schedule,
            timeout=timeout or failure.timeout,
            checks=check_objects,
        )
    return verdict(outcome, list(outcome.violations), failure.mode), outcome
