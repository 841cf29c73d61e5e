"""One validation module: every constructor and CLI path checks its arguments here.

Each check raises ``InvalidArgument`` with one line that names the argument, its value
and what would be accepted, e.g. ``rank=-1 must not be negative; ranks count from 0``.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from chaoslight._schedule._catalog import SITES
from chaoslight._schedule._errors import InvalidArgument, suggest

# Upper bounds, each with the reason a larger value can only be a mistake.
MAX_WORLD_SIZE = 64
WORLD_SIZE_WHY = "each rank is a process on this machine"
MAX_RANK = 10**6
RANK_WHY = "no job has that many ranks"
MAX_COUNT = 10**9
COUNT_WHY = "no training run makes that many steps or calls"
MAX_BYTES = 2**48
BYTES_WHY = "256 TiB, more memory than any device has"
# A search's sizes (``chaoslight fuzz`` and ``chaoslight.fuzz``).
MAX_EXAMPLES = 10**6
MAX_REPLAYS = 100
RUNS_WHY = "each one is a whole training run"
MAX_STEPS = 10**6
STEPS_WHY = "faults target steps 0..steps-1 of a test's fit, which is short"
MAX_FAULTS = 64
MAX_RESTARTS = 3
# A fault's ``run``: the run of a schedule with restarts it fires in (1 the first), or
# every run; a run past the last restart can never happen.
EVERY_RUN = "every"
MAX_RUN = MAX_RESTARTS + 1
FAULTS_WHY = "each fault in a schedule is one more to shrink and to read"
# What a file may ask for (a failure file, a schedule file, CHAOSLIGHT_SCHEDULE, the
# database): files are data, so each has a bound (docs/explanation/trust.md).
MAX_SCHEDULE_FAULTS = 1000
SCHEDULE_FAULTS_WHY = "every call of a site looks its faults up; a schedule is read by a person"
MAX_TIMEOUT_S = 86400.0
TIMEOUT_WHY = "a day; a rank with no progress that long is hung, and more only delays the verdict"
MAX_JSON_DEPTH = 16
JSON_DEPTH_WHY = "a file chaoslight writes nests 6 deep"
MAX_FILE_BYTES = 8 * 2**20
FILE_WHY = "a failure or schedule file chaoslight writes is a few KiB"
# An Allocate holds real memory: with no budget, all of a schedule's allocations on all
# ranks may take at most this share of the memory free when the run starts; the rest is
# for the ranks, the parent and the machine (past it the OOM killer picks a process).
ALLOCATE_SHARE = 0.5
# Libraries whose exception classes a schedule may name by import path: chaoslight patches
# them, so importing them runs only their own code. Any other module must already be
# imported (docs/explanation/trust.md); a schedule never imports one.
TRUSTED_LIBRARIES = ("torch", "lightning", "pytorch_lightning", "lightning_fabric", "torchmetrics")
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


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


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgument(f"{name}={value!r} must be True or False")
    return value


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


def check_optional_bounded_int(
    name: str, value: Any, minimum: int, maximum: int, why: str
) -> int | None:
    """None, or an int in ``[minimum, maximum]`` (a fault's rank, step, nth, times)."""
    if value is None:
        return None
    check_int(name, value, minimum, allow_none=True)
    return check_bounded_int(name, value, minimum, maximum, why)


def check_count(name: str, value: Any, minimum: int = 1, allow_none: bool = False) -> int | None:
    """A step, call or example count: an int from ``minimum`` up to ``MAX_COUNT``."""
    if value is None and allow_none:
        return None
    check_int(name, value, minimum, allow_none)
    return check_bounded_int(name, value, minimum, MAX_COUNT, COUNT_WHY)


def check_bytes(name: str, value: Any) -> int:
    """A size in bytes: a positive int of at most ``MAX_BYTES``."""
    return check_bounded_int(name, value, 1, MAX_BYTES, BYTES_WHY)


def check_world_size(name: str, value: Any, minimum: int = 1, what: str = "rank") -> int:
    """How many ranks (or spare workers) a World starts: up to ``MAX_WORLD_SIZE``."""
    why = WORLD_SIZE_WHY.replace("rank", what)
    return check_bounded_int(name, value, minimum, MAX_WORLD_SIZE, why)


def check_sites(name: str, sites: Iterable[str]) -> tuple[str, ...]:
    """One or more registered site names (``chaoslight.sites()`` lists them)."""
    if isinstance(sites, str):
        raise InvalidArgument(f"{name}={sites!r} must be a list of sites, e.g. [{sites!r}]")
    chosen = tuple(sites)
    for site in chosen:
        if site not in SITES:
            raise InvalidArgument(
                f"{name}: {site!r} is not a known site{suggest(str(site), SITES)}"
            )
    if not chosen:
        raise InvalidArgument(f"{name}=() must name at least one site")
    return chosen


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


def check_duration(name: str, value: Any, maximum: float, why: str = "") -> float:
    """A finite number of seconds from 0 (at once) to ``maximum``; ``why`` says the bound."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidArgument(f"{name}={value!r} must be a finite number of seconds")
    if not 0 <= value <= maximum:
        raise InvalidArgument(
            f"{name}={value} must be between 0 and {maximum:g}" + (f" ({why})" if why else "")
        )
    return float(value)


def check_tolerance(name: str, value: Any) -> float:
    """A finite number that is not negative (an absolute or relative tolerance)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{name}={value!r} must be a number, not {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise InvalidArgument(f"{name}={value!r} must be a finite number, not negative")
    return float(value)


def check_run(name: str, value: Any) -> int | str | None:
    """A fault's run: None (the first run that reaches it), a run number from 1 up to
    ``MAX_RUN``, or ``EVERY_RUN`` (again in each run)."""
    if value is None or value == EVERY_RUN:
        return value
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RUN:
        raise InvalidArgument(
            f"{name}={value!r} must be a run number from 1 to {MAX_RUN} (run 1 is the first; "
            f"each restart is one more), {EVERY_RUN!r} for each run, or None"
        )
    return value


def check_runs_fit(faults: Iterable[Any], restarts: int) -> None:
    """Every fault bound to a run names a run a schedule with ``restarts`` can make."""
    for fault in faults:
        run = getattr(fault, "run", None)
        if isinstance(run, int) and run > restarts + 1:
            raise InvalidArgument(
                f"{fault}: run={run} needs restarts>={run - 1}; the schedule has "
                f"restarts={restarts}"
            )


def check_ranks_fit(faults: Iterable[Any], size: int) -> None:
    """Every fault's rank is a rank of a world of ``size`` ranks."""
    for fault in faults:
        if fault.rank is not None and fault.rank >= size:
            raise InvalidArgument(
                f"{fault}: rank={fault.rank} is not a rank of World(size={size}); "
                f"ranks are 0..{size - 1}"
            )


def check_directory(name: str, path: Any) -> Path:
    """A folder that exists or can be made: not a file, and not under one."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise InvalidArgument(f"{name}={path!r} must be a folder path")
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise InvalidArgument(f"{name}={str(path)!r} is a file; give a folder (made if missing)")
    for parent in folder.absolute().parents:
        if parent.exists() and not parent.is_dir():
            raise InvalidArgument(f"{name}={str(path)!r} is under {str(parent)!r}, a file")
    return folder


def check_output_file(name: str, path: Any) -> Path:
    """A file to write: not a folder, and not under a file."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise InvalidArgument(f"{name}={path!r} must be a file path")
    target = Path(path)
    if target.is_dir():
        raise InvalidArgument(f"{name}={str(path)!r} is a folder; give a file name")
    check_directory(name, target.parent)
    return target


def read_text_file(what: str, path: Any) -> str:
    """A UTF-8 text file's contents (at most ``MAX_FILE_BYTES``), or one line saying why
    it cannot be read."""
    try:
        if Path(path).is_file() and Path(path).stat().st_size > MAX_FILE_BYTES:
            raise InvalidArgument(
                f"{what} {str(path)!r} is larger than {MAX_FILE_BYTES} bytes ({FILE_WHY})"
            )
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidArgument(f"cannot read {what} {str(path)!r}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise InvalidArgument(
            f"cannot read {what} {str(path)!r}: not UTF-8 text (byte {exc.start})"
        ) from None


def check_import_path(name: str, value: Any) -> tuple[str, str]:
    """``module:QualName`` split in two: dotted Python names, absolute, no dunder part
    (``__main__``, ``__globals__``): what chaoslight may look up, never a path to import."""
    module, sep, qualname = value.partition(":") if isinstance(value, str) else ("", "", "")
    parts = [*module.split("."), *qualname.split(".")]
    if not (sep and _DOTTED.match(module) and _DOTTED.match(qualname)) or any(
        part.startswith("__") for part in parts
    ):
        raise InvalidArgument(
            f"{name}={value!r} must be 'module:QualName', e.g. 'mypkg.errors:DiskFull'"
        )
    return module, qualname


def is_trusted_library(module: str) -> bool:
    """Whether ``module`` is in one of the ``TRUSTED_LIBRARIES`` packages."""
    return module.partition(".")[0] in TRUSTED_LIBRARIES


def check_timeout(name: str, value: Any) -> float:
    """A rank's progress timeout: positive, finite, at most ``MAX_TIMEOUT_S``."""
    seconds = check_seconds(name, value)
    if seconds > MAX_TIMEOUT_S:
        raise InvalidArgument(f"{name}={value:g} must be at most {MAX_TIMEOUT_S:g} ({TIMEOUT_WHY})")
    return seconds


def check_json_depth(what: str, value: Any) -> None:
    """Refuse JSON nested deeper than ``MAX_JSON_DEPTH`` (walked without recursion)."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if depth > MAX_JSON_DEPTH:
            raise InvalidArgument(
                f"{what} nests deeper than {MAX_JSON_DEPTH} levels ({JSON_DEPTH_WHY})"
            )
        children = item.values() if isinstance(item, dict) else item
        if isinstance(item, (dict, list, tuple)):
            pending.extend((child, depth + 1) for child in children)


def check_allocations(faults: Iterable[Any], budget: Any, ranks: int, available: int) -> None:
    """The real memory a schedule's ``allocate`` faults may hold on ``ranks`` ranks is at
    most ``ALLOCATE_SHARE`` of ``available`` bytes; under a budget a rank holds at most the
    budget's limit (an allocation past it is the simulated OOM, never real memory)."""
    sizes = [
        (f, f.nbytes * (ranks if f.rank is None else 1)) for f in faults if f.kind == "allocate"
    ]
    total = sum(size for _, size in sizes)
    if budget is not None:
        total = min(total, budget.limit_bytes * ranks)
    allowed = int(available * ALLOCATE_SHARE)
    if sizes and total > allowed:
        largest = max(sizes, key=lambda pair: pair[1])[0]
        raise InvalidArgument(
            f"{largest}: the schedule's allocations hold {_gib(total)} on {ranks} rank(s), more "
            f"than {ALLOCATE_SHARE:.0%} of the {_gib(available)} free; allocate less, or add a "
            "memory budget smaller than the allocation to simulate running out"
        )


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:,.1f} GiB"


def parse_json(what: str, text: str) -> Any:
    """``json.loads`` with every way it can fail as one line: malformed, a number too long
    to read, nesting deep enough to exhaust Python's stack, or deeper than the bound."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(
            f"{what} is malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except (ValueError, RecursionError) as exc:  # a 5000-digit number; [[[[...]]]] 10^5 deep
        reason = (
            f"nests deeper than {MAX_JSON_DEPTH} levels" if isinstance(exc, RecursionError) else exc
        )
        raise InvalidArgument(f"{what} is not JSON chaoslight reads: {reason}") from None
    check_json_depth(what, value)
    return value


# -- a search's settings (``_search/_settings.py``) ----------------------------------------
def check_seed(name: str, value: Any) -> int | None:
    """A search's seed: None (a random one each time) or an int."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise InvalidArgument(f"{name}={value!r} must be an int, or None for a random seed")
    return value


def check_shard(name: str, value: Any) -> tuple[int, int] | None:
    """None, or ``(i, n)``: the i-th of n disjoint parts of a search, ``0 <= i < n``."""
    if value is None:
        return None
    pair = tuple(value) if isinstance(value, (tuple, list)) else ()
    if len(pair) != 2 or any(isinstance(v, bool) or not isinstance(v, int) for v in pair):
        raise InvalidArgument(f"{name}={value!r} must be a pair (i, n), e.g. (0, 4)")
    index, count = pair
    if not 0 <= index < count:
        raise InvalidArgument(f"{name}={index}/{count} must be i/N with 0 <= i < N")
    return index, count
