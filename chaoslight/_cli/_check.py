"""``chaoslight check TARGET``: one run with no fault and the default checks (does the
target work at all?)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from chaoslight._cli._arguments import add_world_options, search_settings
from chaoslight._cli._usage import EXIT_CLEAN, EXIT_FOUND, EXIT_INTERNAL
from chaoslight._search import baseline


def add_command(commands: Any) -> None:
    check_parser = commands.add_parser(
        "check", help="run TARGET once with no fault and the default checks"
    )
    check_parser.add_argument("target", help="path/file.py:function or pkg.module:function")
    add_world_options(check_parser)


def main(args: argparse.Namespace) -> int:
    settings = search_settings(args)
    verdict, outcome = baseline(args.target, settings)
    console = Console(highlight=False, soft_wrap=True, markup=False)
    if verdict.internal:
        console.print(f"chaoslight check: INTERNAL ERROR of chaoslight: {verdict.reason}")
        return EXIT_INTERNAL
    if verdict.failed:
        console.print(f"chaoslight check: {args.target} fails with no fault injected")
        console.print(f"failure: {verdict.reason}")
        return EXIT_FOUND
    console.print(
        f"chaoslight check: {args.target} passes on {settings.world_size} ranks with no fault "
        f"({outcome.wall_s:.1f} s; checks: {', '.join(settings.checks)})"
    )
    return EXIT_CLEAN
