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
    check_directory,
    check_output_file,
    read_text_file,
)
from chaoslight._search import DEFAULT_CHECKS, Settings
from chaoslight._search._database import check_database, is_url
from chaoslight._search._settings import DEFAULT_TIMEOUT_S, NUMBER_CHECKS, SETTINGS
from chaoslight._search._soak import check_soak_seconds

# Argument name -> its check; an argument a command does not have, or left at None, is skipped.
# A search's numbers are checked as ``Settings`` checks them, named as the flag is spelt.
ARGUMENT_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    **NUMBER_CHECKS,
    "database": lambda name, value: (
        is_url(check_database(name, value) or "") or check_directory(name, value)
    ),
    "events_dir": check_directory,
    "out": check_output_file,
    "emit_test": check_output_file,
    "html": check_output_file,
    "mtbf": check_soak_seconds,
    "duration": check_soak_seconds,
    "replay": lambda name, value: read_text_file("--replay soak file", value),
}


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse an out-of-range number or an unusable path in any command's arguments."""
    try:
        for name, check in ARGUMENT_CHECKS.items():
            value = getattr(args, name, None)
            if value is not None:
                check("--" + name.replace("_", "-"), value)
        if args.command == "replay":
            read_text_file("failure or schedule file", args.file)
    except InvalidArgument as exc:
        raise UsageError(str(exc)) from None


def add_world_options(parser: argparse.ArgumentParser) -> None:
    """--world-size, --timeout, --check and --no-check, with a search's defaults."""
    parser.add_argument(
        "--world-size",
        type=int,
        default=Settings.world_size,
        metavar="N",
        help="ranks, each a process on this machine",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
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


def _split(value: str | None) -> list[str] | None:
    return None if value is None else [part.strip() for part in value.split(",") if part.strip()]


def _shard(value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    index, _, count = value.partition("/")
    if not (index.isdigit() and count.isdigit() and int(index) < int(count)):
        raise InvalidArgument(f"--shard={value} must be I/N with 0 <= I < N, e.g. 0/4")
    return int(index), int(count)


# How an option's text becomes a setting, where argparse's value is not the setting already.
_FROM_TEXT: dict[str, Callable[[Any], Any]] = {"faults": _split, "sites": _split, "shard": _shard}


def search_settings(args: argparse.Namespace) -> Settings:
    """The one ``Settings`` of a command's options (those it has; the rest keep their
    defaults), the checks as ``chosen_checks`` makes them."""
    given = {name: getattr(args, name) for name in SETTINGS if hasattr(args, name)}
    for name, convert in _FROM_TEXT.items():
        if name in given:
            given[name] = convert(given[name])
    return Settings(**{**given, "checks": chosen_checks(args)})
