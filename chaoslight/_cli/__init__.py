"""The ``chaoslight`` command: ``sites``, ``faults``, ``run``, ``fuzz`` and ``replay``.

Usage errors (bad flags, an unreadable or invalid schedule, a missing command) print
one line and exit 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from chaoslight._cli import _catalogue, _fuzz, _run
from chaoslight._cli._usage import Parser, UsageError
from chaoslight._schedule import ChaosError

__all__ = ["UsageError", "build_parser", "entry", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="chaoslight", description="Deterministic chaos for Lightning training.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    commands.add_parser("sites", help="list the injection sites, one line each")
    commands.add_parser("faults", help="list the fault kinds, one line each")
    run = commands.add_parser(
        "run",
        help="run any command with a schedule active in every Python process it starts",
        description="chaoslight run --schedule FILE -- torchrun --nproc-per-node 2 train.py",
    )
    run.add_argument("--schedule", required=True, help="schedule file (JSON or text form)")
    run.add_argument("--timeout", type=float, default=None, help="kill the job after S seconds")
    run.add_argument("--events-dir", default=None, help="keep the per-process event logs here")
    run.add_argument("argv", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    _fuzz.add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.command == "sites":
            return _catalogue.print_sites()
        if args.command == "faults":
            return _catalogue.print_faults()
        if args.command == "fuzz":
            return _fuzz.fuzz_command(args)
        if args.command == "replay":
            return _fuzz.replay_command_main(args)
        return _run.run_command(args)
    except (UsageError, ChaosError) as exc:
        print(f"chaoslight: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
