"""``chaoslight fuzz`` and ``chaoslight replay``."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from chaoslight._cli._progress import Display
from chaoslight._schedule import InvalidArgument
from chaoslight._search import fuzz, replay
from chaoslight._search._campaign import CLEAN, FLAKY
from chaoslight._search._failure import Failure, emit_test, replay_command


def add_commands(commands: Any) -> None:
    fuzz_parser = commands.add_parser("fuzz", help="search schedules that break TARGET; shrink one")
    fuzz_parser.add_argument("target", help="path/file.py:function or pkg.module:function")
    fuzz_parser.add_argument("--world-size", type=int, default=2)
    fuzz_parser.add_argument("--max-examples", type=int, default=100)
    fuzz_parser.add_argument("--faults", default=None, help="comma-separated fault kinds")
    fuzz_parser.add_argument("--sites", default=None, help="comma-separated site names")
    fuzz_parser.add_argument("--steps", type=int, default=4, help="steps faults may target")
    fuzz_parser.add_argument("--max-faults", type=int, default=3)
    fuzz_parser.add_argument("--seed", type=int, default=None)
    fuzz_parser.add_argument("--timeout", type=float, default=20.0, help="per example, seconds")
    fuzz_parser.add_argument("--check", action="append", default=[], metavar="NAME")
    fuzz_parser.add_argument("--mode", choices=("survive", "fail-cleanly"), default=None)
    fuzz_parser.add_argument("--replays", type=int, default=3)
    fuzz_parser.add_argument("--out", default="chaoslight-failure.json")
    fuzz_parser.add_argument("--database", default=None, help="Hypothesis example database dir")
    fuzz_parser.add_argument("--emit-test", default=None, metavar="PATH")

    replay_parser = commands.add_parser("replay", help="run a failure or schedule file again")
    replay_parser.add_argument("file", help="a failure file from fuzz, or a schedule file")
    replay_parser.add_argument("target", nargs="?", default=None)
    replay_parser.add_argument("--world-size", type=int, default=None)
    replay_parser.add_argument("--timeout", type=float, default=None)
    replay_parser.add_argument("--check", action="append", default=None, metavar="NAME")


def _split(value: str | None) -> list[str] | None:
    return None if value is None else [part.strip() for part in value.split(",") if part.strip()]


def fuzz_command(args: argparse.Namespace) -> int:
    console = Console(highlight=False, soft_wrap=True, markup=False)
    mode = args.mode
    kinds = _split(args.faults)
    if mode is None and kinds is None:
        mode = "survive"
    result, failure = fuzz(
        args.target,
        world_size=args.world_size,
        max_examples=args.max_examples,
        kinds=kinds,
        sites=_split(args.sites),
        steps=args.steps,
        max_faults=args.max_faults,
        seed=args.seed,
        timeout=args.timeout,
        checks=args.check,
        mode=mode,
        replays=args.replays,
        database=args.database,
        display=Display(f"{args.target} (world size {args.world_size}, {mode or 'survive'})"),
    )
    if result.status == CLEAN:
        console.print(
            f"chaoslight fuzz: no failure in {result.examples} examples ({result.wall_s:.1f} s)"
        )
        return 0
    assert failure is not None and result.schedule is not None
    failure.save(args.out)
    word = "FLAKY failure (not reproduced by every replay)" if result.status == FLAKY else "failure"
    console.print(
        f"chaoslight fuzz: {word} after {result.examples} examples ({result.wall_s:.1f} s)"
    )
    console.print("minimal failing schedule:" if result.status != FLAKY else "schedule:")
    for line in result.schedule.to_text().splitlines():
        console.print(f"  {line}")
    console.print(f"failure: {failure.reason}")
    if result.status == FLAKY:
        seen = ", ".join(f"{r.status}{' (failed)' if r.failed else ''}" for r in result.replays)
        console.print(f"replays saw: {seen}")
    console.print(f"schedule written to {args.out}")
    console.print(f"replay: {replay_command(args.out, failure)}")
    if args.emit_test:
        emit_test(failure, args.emit_test)
        console.print(f"regression test written to {args.emit_test}")
    return 1


def replay_command_main(args: argparse.Namespace) -> int:
    failure = Failure.load(args.file)
    target = args.target or failure.target
    if not target:
        raise InvalidArgument(
            f"{args.file} names no target: give one, e.g. replay FILE train.py:main"
        )
    verdict, outcome = replay(
        failure,
        target=target,
        world_size=args.world_size,
        timeout=args.timeout,
        checks=args.check,
    )
    console = Console(highlight=False, soft_wrap=True, markup=False)
    console.print(outcome.report())
    for violation in getattr(outcome, "violations", []):
        console.print(f"check failed: {violation}")
    console.print(
        f"replay: {'still fails' if verdict.failed else 'passes'} "
        f"({outcome.status}){': ' + verdict.reason if verdict.reason else ''}"
    )
    return 1 if verdict.failed else 0
