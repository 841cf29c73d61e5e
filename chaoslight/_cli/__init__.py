"""The ``chaoslight`` command: ``sites``, ``faults``, ``run``, ``fuzz``, ``check``, ``replay``,
``soak``.

Usage errors (bad flags, an unreadable or invalid schedule, an argument out of range)
print one line and exit 2, never a traceback. When the World's rank processes cannot
start (no such interpreter, a rank that dies before its handshake, a process group that
cannot form) the exit status is 4: the machine is at fault, not the call nor the
program. ``chaoslight run --help`` lists the statuses of ``run``.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence

from chaoslight._cli import _catalogue, _check, _fuzz, _replay, _run, _soak
from chaoslight._cli._arguments import check_arguments
from chaoslight._cli._usage import (
    ENVIRONMENT_STATUS,
    EXIT_INTERNAL,
    USAGE_STATUS,
    Parser,
    UsageError,
)
from chaoslight._schedule import ChaosError
from chaoslight._world._slot import WorkersDidNotStart

__all__ = ["UsageError", "build_parser", "entry", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="chaoslight", description="Deterministic chaos for Lightning training.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    commands.add_parser("sites", help="list the injection sites, one line each")
    commands.add_parser("faults", help="list the fault kinds, one line each")
    _run.add_command(commands)
    _fuzz.add_command(commands)
    _check.add_command(commands)
    _replay.add_command(commands)
    _soak.add_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        check_arguments(args)
        if args.command == "sites":
            return _catalogue.print_sites()
        if args.command == "faults":
            return _catalogue.print_faults()
        if args.command == "fuzz":
            return _fuzz.fuzz_command(args)
        if args.command == "replay":
            return _replay.main(args)
        if args.command == "check":
            return _check.main(args)
        if args.command == "soak":
            return _soak.soak_command(args)
        return _run.run_command(args)
    except UsageError as exc:
        print(f"chaoslight: error: {exc}", file=sys.stderr)
        return exc.status
    except WorkersDidNotStart as exc:
        print(f"chaoslight: error: {exc}", file=sys.stderr)
        return ENVIRONMENT_STATUS
    except ChaosError as exc:
        print(f"chaoslight: error: {exc}", file=sys.stderr)
        return USAGE_STATUS
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # chaoslight's own bug: say so, keep the traceback for a report
        print(
            f"chaoslight: INTERNAL ERROR of chaoslight: {type(exc).__name__}: {exc} "
            "(not a finding about your program; please report it with the traceback below)",
            file=sys.stderr,
        )
        traceback.print_exc(file=sys.stderr)
        return EXIT_INTERNAL


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
