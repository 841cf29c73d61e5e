"""``chaoslight fuzz TARGET``: search schedules that break the target, shrink one, replay it.

Exit status: 0 nothing found (or a flaky failure only), 1 a reproduced failure (or a
target that fails with no fault injected), 2 a usage error, 3 an internal error of
chaoslight itself (a bug to report, never a finding about the target), 4 the workers did
not start.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from chaoslight._cli._arguments import add_world_options, search_settings
from chaoslight._cli._outputs import Outputs
from chaoslight._cli._progress import Display
from chaoslight._cli._usage import EXIT_CLEAN, EXIT_FOUND, EXIT_INTERNAL
from chaoslight._report import html_beside, show_timeline
from chaoslight._search import DEFAULT_CHECKS, Settings, fuzz, replay
from chaoslight._search._campaign import (
    BASELINE,
    CLEAN,
    FLAKY,
    FLAKY_BASELINE,
    INTERNAL_ERROR,
    Result,
)
from chaoslight._search._failure import Failure, emit_test, replay_command
from chaoslight._search._kinds import DEFAULT_KINDS
from chaoslight._world import World
from chaoslight._world._target import parse_target


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
    add_world_options(fuzz_parser)
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
        "--max-examples",
        type=int,
        default=Settings.max_examples,
        metavar="N",
        help="schedules to try at most",
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
        default=Settings.steps,
        metavar="N",
        help="faults target steps 0..STEPS-1 when the baseline run records no reach; "
        "otherwise faults go where the baseline run went, over its whole run "
        "(default: %(default)s)",
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
        "--max-faults",
        type=int,
        default=Settings.max_faults,
        metavar="N",
        help="most faults in one schedule",
    )
    search.add_argument(
        "--seed",
        type=int,
        default=None,
        metavar="N",
        help="Hypothesis seed, for a search that repeats exactly (default: a random one)",
    )
    search.add_argument(
        "--replays",
        type=int,
        default=Settings.replays,
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


def fuzz_command(args: argparse.Namespace) -> int:
    outputs = Outputs(args)  # checked now: never a user's file overwritten at the end
    settings = search_settings(args)  # checked now too: a bad kind or site starts no World
    parse_target(args.target)  # nor does a target that names no file or function
    # One World for the search and the traced replay that draws the timeline.
    with World(size=settings.world_size) as world:
        return _fuzz(args, settings, world, outputs)


def _fuzz(args: argparse.Namespace, settings: Settings, world: World, outputs: Outputs) -> int:
    console = Console(highlight=False, soft_wrap=True, markup=False)
    result, failure = fuzz(
        args.target,
        settings,
        display=Display(f"{args.target} (world size {settings.world_size})"),
        world=world,
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
    if args.emit_test and result.status != INTERNAL_ERROR:
        emit_test(failure, test := outputs.test_file())
        console.print(f"regression test written to {test}")
    if result.coverage is not None:
        console.print(result.coverage.line())
    return {INTERNAL_ERROR: EXIT_INTERNAL, FLAKY: EXIT_CLEAN}.get(result.status, EXIT_FOUND)


def _print_result(console: Console, result: Result, failure: Failure) -> None:
    assert result.schedule is not None and result.verdict is not None
    spent = f"after {result.examples} examples ({result.wall_s:.1f} s)"
    if result.status == INTERNAL_ERROR:
        console.print(f"chaoslight fuzz: INTERNAL ERROR of chaoslight {spent}: not a finding")
        console.print("  please report it with this output; the schedule that triggered it:")
    elif result.status == BASELINE:
        console.print(f"chaoslight fuzz: the target fails with no fault injected {spent}")
        console.print("no fault needed (empty schedule)")
    elif result.status == FLAKY_BASELINE:
        console.print(
            f"chaoslight fuzz: the target is flaky with no fault injected: it "
            f"{result.rate_line()}, a race of its own {spent}"
        )
        if result.schedule.faults:
            console.print("this delay, inside the race, makes it fail every time:")
        else:
            console.print("no delay tried made it fail every time (empty schedule):")
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
    if len(result.verdict.accounts) > 1:
        console.print("what explains each symptom:")
        for account in result.verdict.accounts:
            console.print(f"  {account}")
    if result.status in (FLAKY, BASELINE, FLAKY_BASELINE) and result.replays:
        seen = ", ".join(f"{r.status}{' (failed)' if r.failed else ''}" for r in result.replays)
        console.print(f"replays saw: {seen}")


def traced_timeline(console: Console, world: World, failure: Failure, out: str) -> None:
    """Replay a failure once more with tracing on: the text table, the HTML page beside
    the failure file ``out``."""
    verdict, outcome = replay(failure, world=world, trace=True)
    if not verdict.failed:
        console.print("note: the traced replay passed: its timeline shows a passing run")
    show_timeline(console, outcome, verdict, html_beside(out), replay_command(out, failure))
