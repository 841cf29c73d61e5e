"""The settings of one search: every knob of ``fuzz``, ``check`` and ``Campaign``, of
``chaoslight fuzz``/``check`` and of the pytest plugin, in one frozen object.

Each default is written here once (the command line's and the plugin's options read
them) and each value is checked once, when the object is built, by the checks of
``_schedule/_validate.py``: the same mistake gets the same one line wherever it is made.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from chaoslight._runtime import as_checks
from chaoslight._schedule import InvalidArgument, suggest
from chaoslight._schedule._validate import (
    FAULTS_WHY,
    MAX_EXAMPLES,
    MAX_FAULTS,
    MAX_REPLAYS,
    MAX_STEPS,
    RUNS_WHY,
    STEPS_WHY,
    check_bool,
    check_bounded_int,
    check_seconds,
    check_seed,
    check_shard,
    check_timeout,
    check_world_size,
)
from chaoslight._search._database import check_database
from chaoslight._search._failure import DEFAULT_CHECKS
from chaoslight._search._schedule_strategies import schedules

# Seconds a rank of a search's run may go without progress before it counts as hung: short,
# as a search runs many short examples (a World run alone waits longer, ``World.run``).
DEFAULT_TIMEOUT_S = 20.0


def _bounded(minimum: int, maximum: int, why: str) -> Callable[[str, Any], Any]:
    return lambda name, value: check_bounded_int(name, value, minimum, maximum, why)


def _optional_seconds(name: str, value: Any) -> float | None:
    return None if value is None else check_seconds(name, value)


# Each number a search takes, with its check: ``Settings`` runs them on its fields, the
# command line on its flags (named as the flag is spelt), so both say the same words.
NUMBER_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "world_size": check_world_size,
    "timeout": check_timeout,
    "max_examples": _bounded(1, MAX_EXAMPLES, RUNS_WHY),
    "replays": _bounded(0, MAX_REPLAYS, RUNS_WHY),
    "steps": _bounded(1, MAX_STEPS, STEPS_WHY),
    "max_faults": _bounded(1, MAX_FAULTS, FAULTS_WHY),
    "max_time": _optional_seconds,
}


@dataclass(frozen=True)
class Settings:
    """How a search runs: every knob of ``fuzz``, checked once, when it is built.

    ``world_size`` ranks, each run judged with ``checks`` (names or check objects; the
    default checks when not given), a rank with no progress for ``timeout`` seconds is
    hung. The search draws up to ``max_faults`` faults of the kinds ``faults`` (default:
    every kind a correct program can meet) at ``sites`` (default: where the fault-free run
    went; ``steps`` bounds the steps only when a run records no reach), tries at most
    ``max_examples`` schedules, replays a failure ``replays`` times, and stops after
    ``max_time`` seconds (None: no bound). ``seed`` repeats a search exactly; ``database``
    (a folder or a redis:// URL) is shared by campaigns; ``shard=(i, n)`` searches the
    i-th of n disjoint parts of the space; ``strict=True`` makes a known framework issue a
    failure. ``settings.replace(max_examples=10)`` is a checked copy with a change.
    """

    world_size: int = 2
    checks: Sequence[Any] = DEFAULT_CHECKS
    faults: Sequence[str] | None = None
    sites: Sequence[str] | None = None
    steps: int = 4
    max_faults: int = 3
    max_examples: int = 100
    max_time: float | None = None
    seed: int | None = None
    timeout: float = DEFAULT_TIMEOUT_S
    replays: int = 3
    database: str | None = field(default=None, repr=False)  # a URL may hold a password
    shard: tuple[int, int] | None = None
    strict: bool = False

    def __post_init__(self) -> None:
        for name, check in NUMBER_CHECKS.items():
            self._set(name, check(name, getattr(self, name)))
        checks = DEFAULT_CHECKS if self.checks is None else self.checks
        as_checks(checks)  # a name that is no check, or an object that is none, is refused
        self._set("checks", tuple(checks))
        check_bool("strict", self.strict)
        check_seed("seed", self.seed)
        check_database("database", self.database)
        self._set("shard", check_shard("shard", self.shard))
        # The kinds and sites as the search's strategy checks them (an unknown name, a kind
        # that cannot fire at any of the sites), before any World starts.
        schedules(
            world_size=self.world_size,
            steps=self.steps,
            sites=self.sites,
            faults=self.faults,
            max_faults=self.max_faults,
        )
        for name in ("faults", "sites"):
            value = getattr(self, name)
            self._set(name, None if value is None else tuple(value))

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)  # normalised once, while it is being built

    def replace(self, **changes: Any) -> Settings:
        """A copy with ``changes`` (keyword names as the fields), checked like a new one."""
        return with_keywords(self, changes, "Settings.replace")


SETTINGS = tuple(f.name for f in dataclasses.fields(Settings))


def with_keywords(settings: Settings | None, keywords: Mapping[str, Any], caller: str) -> Settings:
    """``settings`` (or the defaults) with ``keywords`` laid over it: a keyword given
    beside a settings object wins. ``caller`` names the function in the error of a
    keyword that is not a setting."""
    if settings is not None and not isinstance(settings, Settings):
        raise InvalidArgument(
            f"settings={settings!r} must be a chaoslight.Settings, e.g. Settings(seed=1)"
        )
    unknown = next((name for name in keywords if name not in SETTINGS), None)
    if unknown is not None:
        hint = suggest(unknown, SETTINGS) or "; settings: " + ", ".join(SETTINGS)
        raise TypeError(f"{caller}() got an unexpected keyword argument {unknown!r}{hint}")
    base = Settings() if settings is None else settings
    return dataclasses.replace(base, **keywords) if keywords else base
