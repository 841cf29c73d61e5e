"""The options several commands share, and range checks of the command line's numbers and
paths, before anything starts.

Each is a check of ``_schedule/_validate.py`` named as the flag is spelt, so a mistake is
one line before a World or a job is started, e.g. ``--world-size=100000 must be at most 64
(each rank is a process on this machine)``, and the same mistake made through the Python
API gets the same words.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from chaoslight._cli._usage import UsageError
from chaoslight._schedule._errors import InvalidArgument
from chaoslight._schedule._validate import (
    FAULTS_WHY,
    MAX_EXAMPLES,
    MAX_FAULTS,
    MAX_REPLAYS,
    MAX_STEPS,
    RUNS_WHY,
    STEPS_WHY,
    check_bounded_int,
    check_directory,
    check_output_file,
    check_seconds,
    check_world_size,
    read_text_file,
)
from chaoslight._search import DEFAULT_CHECKS
from chaoslight._search._database import check_database, is_url


def _bounded(minimum: int, maximum: int, why: str) -> Callable[[str, Any], Any]:
    return lambda name, value: check_bounded_int(name, value, minimum, maximum, why)


# Argument name -> its check; an argument a command does not have, or left at None, is skipped.
CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "world_size": check_world_size,
    "max_examples": _bounded(1, MAX_EXAMPLES, RUNS_WHY),
    "replays": _bounded(0, MAX_REPLAYS, RUNS_WHY),
    "steps": _bounded(1, MAX_STEPS, STEPS_WHY),
    "max_faults": _bounded(1, MAX_FAULTS, FAULTS_WHY),
    "timeout": check_seconds,
    "max_time": check_seconds,
    "database": lambda name, value: (
        is_url(check_database(name, value) or "") or check_directory(name, value)
    ),
    "events_dir": check_directory,
    "out": check_output_file,
    "emit_test": check_output_file,
    "html": check_output_file,
}


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse an out-of-range number or an unusable path in any command's arguments."""
    try:
        for name, check in CHECKS.items():
            value = getattr(args, name, None)
            if value is not None:
                check("--" + name.replace("_", "-"), value)
        if args.command == "replay":
            read_text_file("failure or schedule file", args.file)
    except InvalidArgument as exc:
        raise UsageError(str(exc)) from None


def add_world_options(parser: argparse.ArgumentParser, world_size: int, timeout: float) -> None:
    parser.add_argument(
        "--world-size",
        type=int,
        default=world_size,
        metavar="N",
        help="ranks, each a process on this machine",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=timeout,
        metavar="SECONDS",
        help="seconds a rank may go without progress before it counts as hung",
    )
    parser.add_argument(
        "--check",
        action="append",
        default=[],
        metavar="NAME",
        help=f"add a check to the defaults ({', '.join(DEFAULT_CHECKS)}); repeatable "
        "(default: none added)",
    )
    parser.add_argument(
        "--no-check",
        action="append",
        default=[],
        metavar="NAME",
        help="remove a default check; repeatable (default: none removed)",
    )


def chosen_checks(args: argparse.Namespace) -> list[str]:
    """The default checks less --no-check, plus --check, in that order."""
    unknown = [name for name in args.no_check if name not in DEFAULT_CHECKS]
    if unknown:
        raise InvalidArgument(
            f"--no-check {unknown[0]!r} is not a default check; defaults: "
            + ", ".join(DEFAULT_CHECKS)
        )
    chosen = [name for name in DEFAULT_CHECKS if name not in args.no_check]
    return chosen + [name for name in args.check if name not in chosen]
