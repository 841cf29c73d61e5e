"""``chaoslight fuzz TARGET``: search schedules that break the target, shrink one, replay it.

Exit status: 0 nothing found (or a flaky failure only), 1 a reproduced failure (or a
target that fails with no fault injected), 2 a usage error, 3 an internal error of
chaoslight itself (a bug to report, never a finding about the target), 4 the workers did
not start.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.console import Console

from chaoslight._cli._arguments import add_world_options, chosen_checks
from chaoslight._cli._outputs import Outputs
from chaoslight._cli._progress import Display
from chaoslight._cli._usage import EXIT_CLEAN, EXIT_FOUND, EXIT_INTERNAL
from chaoslight._report import html_beside, show_timeline
from chaoslight._schedule import InvalidArgument
from chaoslight._search import DEFAULT_CHECKS, fuzz, replay
from chaoslight._search._campaign import BASELINE, CLEAN, FLAKY, INTERNAL, Result
from chaoslight._search._failure import Failure, emit_test, replay_command
from chaoslight._search._strategies import DEFAULT_KINDS, MODES
from chaoslight._world import World


def add_command(commands: Any) -> None:
    fuzz_parser = commands.add_parser(
        "fuzz",
        help="search schedules that break TARGET; shrink and replay one",
        description="With no options: every fault kind a correct program can meet "
        f"({', '.join(DEFAULT_KINDS)}), the default checks ({', '.join(DEFAULT_CHECKS)}), "
        "each run judged by the fault-aware oracle (docs/oracle.md). Exit 0: nothing "
        "found; 1: a failure; 2: usage error; 3: internal error of chaoslight.",
    )
    fuzz_parser.add_argument("target", help="path/file.py:function or pkg.module:function")
    add_world_options(fuzz_parser, world_size=2, timeout=20.0)
    _search_options(fuzz_parser.add_argument_group("search"))
    out = fuzz_parser.add_argument_group("output")
    out.add_argument(
        "--out",
        default="chaoslight-failure.json",
        metavar="FILE",
        help="the failure file to write",
    )
    out.add_argument(
        "--emit-test",
        default=None,
        metavar="PATH",
        help="also write a pytest regression test to PATH (default: none)",
    )
    out.add_argument(
        "--no-html",
        action="store_true",
        help="skip the failure's timeline (default: the failure is replayed once more with "
        "tracing; its per-rank table is printed and its page written beside --out, e.g. "
        "chaoslight-failure.html: one self-contained HTML file, a lane per rank)",
    )
    out.add_argument(
        "--strict",
        action="store_true",
        help="treat known issues of the framework (e.g. Lightning's SIGTERM handling) as "
        "failures (default: reported apart, exit 0)",
    )


def _search_options(search: Any) -> None:
    search.add_argument(
        "--max-examples", type=int, default=100, metavar="N", help="schedules to try at most"
    )
    search.add_argument(
        "--faults",
        default=None,
        metavar="KINDS",
        help=f"comma-separated fault kinds (default: {','.join(DEFAULT_KINDS)})",
    )
    search.add_argument(
        "--sites",
        default=None,
        metavar="SITES",
        help="comma-separated site names (default: every site each fault kind can fire at)",
    )
    search.add_argument(
        "--steps",
        type=int,
        default=4,
        metavar="N",
        help="faults target steps 0..STEPS-1 when the baseline run records no reach; "
        "otherwise faults go where the baseline run went, over its whole run (default: 4)",
    )
    search.add_argument(
        "--max-time",
        type=float,
        default=None,
        metavar="SECONDS",
        help="bound the whole campaign (the database's failures, search, shrinking, replays); "
        "it stops with the best result so far (default: no bound)",
    )
    search.add_argument(
        "--shard",
        default=None,
        metavar="I/N",
        help="search the I-th of N disjoint parts of the reached fault space and replay only "
        "the --database failures in it (workers sharing --database; default: all of it)",
    )
    search.add_argument(
        "--max-faults", type=int, default=3, metavar="N", help="most faults in one schedule"
    )
    search.add_argument(
        "--seed",
        type=int,
        default=None,
        metavar="N",
        help="Hypothesis seed, for a search that repeats exactly (default: a random one)",
    )
    search.add_argument(
        "--mode",
        choices=tuple(MODES),
        default=None,
        help="deprecated: a filter of fault kinds (survive: benign kinds; fail-cleanly: "
        "hard; default: no filter)",
    )
    search.add_argument(
        "--replays",
        type=int,
        default=3,
        metavar="N",
        help="replays of a found failure, the first in a fresh World, to tell a flaky one",
    )
    search.add_argument(
        "--database",
        default=None,
        metavar="DIR|URL",
        help="a folder (made if missing) or a redis://, rediss:// or unix:// URL campaigns "
        "share; if it fails: one warning, the campaign goes on (default: none kept)",
    )


def _split(value: str | None) -> list[str] | None:
    return None if value is None else [part.strip() for part in value.split(",") if part.strip()]


def _shard(value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    index, _, count = value.partition("/")
    if not (index.isdigit() and count.isdigit() and int(index) < int(count)):
        raise InvalidArgument(f"--shard={value} must be I/N with 0 <= I < N, e.g. 0/4")
    return int(index), int(count)


def _kinds(args: argparse.Namespace) -> list[str] | None:
    kinds = _split(args.faults)
    if args.mode is None:
        return kinds
    allowed = MODES[args.mode]
    kept = [k for k in (kinds or allowed) if k in allowed]
    if not kept:
        raise InvalidArgument(
            f"--faults {args.faults} has no kind that mode={args.mode!r} draws "
            f"({', '.join(allowed)})"
        )
    print(
        f"chaoslight: --mode is deprecated: every run is judged by the oracle; "
        f"--mode {args.mode} now only keeps the kinds {', '.join(allowed)}",
        file=sys.stderr,
    )
    return kept


def fuzz_command(args: argparse.Namespace) -> int:
    outputs = Outputs(args)  # checked now: never a user's file overwritten at the end
    # One World for the search and the traced replay that draws the timeline.
    with World(size=args.world_size) as world:
        return _fuzz(args, world, outputs)


def _fuzz(args: argparse.Namespace, world: World, outputs: Outputs) -> int:
    console = Console(highlight=False, soft_wrap=True, markup=False)
    result, failure = fuzz(
        args.target,
        world_size=args.world_size,
        checks=chosen_checks(args),
        faults=_kinds(args),
        sites=_split(args.sites),
        steps=args.steps,
        max_faults=args.max_faults,
        max_examples=args.max_examples,
        seed=args.seed,
        timeout=args.timeout,
        replays=args.replays,
        database=args.database,
        max_time=args.max_time,
        shard=_shard(args.shard),
        display=Display(f"{args.target} (world size {args.world_size})"),
        world=world,
        strict=args.strict,
        on_failure=lambda found: found.save(outputs.failure_file()),  # before the database
    )
    for finding in result.known:
        for line in finding.report():
            console.print(line)
    if result.status == CLEAN:
        console.print(
            f"chaoslight fuzz: no failure in {result.examples} examples ({result.wall_s:.1f} s)"
        )
        if result.coverage is not None:
            console.print(result.coverage.line())
        return EXIT_CLEAN
    assert failure is not None and result.schedule is not None
    _print_result(console, result, failure)
    console.print(f"written to {outputs.out}")  # by on_failure, as soon as it was confirmed
    console.print(f"replay: {replay_command(outputs.out, failure)}")
    if not args.no_html and outputs.page() is not None:
        traced_timeline(console, world, failure, str(outputs.out))
    if args.emit_test and result.status != INTERNAL:
        emit_test(failure, test := outputs.test_file())
        console.print(f"regression test written to {test}")
    if result.coverage is not None:
        console.print(result.coverage.line())
    return {INTERNAL: EXIT_INTERNAL, FLAKY: EXIT_CLEAN}.get(result.status, EXIT_FOUND)


def _print_result(console: Console, result: Result, failure: Failure) -> None:
    assert result.schedule is not None and result.verdict is not None
    spent = f"after {result.examples} examples ({result.wall_s:.1f} s)"
    if result.status == INTERNAL:
        console.print(f"chaoslight fuzz: INTERNAL ERROR of chaoslight {spent}: not a finding")
        console.print("  please report it with this output; the schedule that triggered it:")
    elif result.status == BASELINE:
        console.print(f"chaoslight fuzz: the target fails with no fault injected {spent}")
        console.print("no fault needed (empty schedule)")
    elif result.status == FLAKY:
        console.print(f"chaoslight fuzz: FLAKY failure (not reproduced by every replay) {spent}")
        console.print("schedule (not minimal: it does not always fail):")
    else:
        console.print(f"chaoslight fuzz: failure {spent}")
        console.print("minimal failing schedule (every fault in it is needed):")
    for line in result.schedule.to_text().splitlines():
        console.print(f"  {line}")
    console.print(f"failure: {failure.reason}")
    for line in result.verdict.notes:
        console.print(f"note: {line}")
    if result.status in (FLAKY, BASELINE) and result.replays:
        seen = ", ".join(f"{r.status}{' (failed)' if r.failed else ''}" for r in result.replays)
        console.print(f"replays saw: {seen}")


def traced_timeline(console: Console, world: World, failure: Failure, out: str) -> None:
    """Replay a failure once more with tracing on: the text table, the HTML page beside
    the failure file ``out``."""
    verdict, outcome = replay(failure, world=world, trace=True)
    if not verdict.failed:
        console.print("note: the traced replay passed: its timeline shows a passing run")
    show_timeline(console, outcome, verdict, html_beside(out), replay_command(out, failure))
