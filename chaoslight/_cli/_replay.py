"""``chaoslight replay FILE [TARGET]``: run a failure or schedule file again, judged as
the search judged it; print the cause first and the per-rank timeline. A soak's record
replays each of its findings in turn (``chaoslight soak --replay FILE`` runs every job)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from chaoslight._cli._outputs import check_page
from chaoslight._cli._usage import EXIT_CLEAN, EXIT_FOUND, EXIT_INTERNAL
from chaoslight._report import show_cause_traceback, show_timeline
from chaoslight._runtime._cpu_budget import replay_note
from chaoslight._search import replay
from chaoslight._search._failure import Failure, replay_command
from chaoslight._search._soak_record import soak_failures
from chaoslight._search._specs import typed_checks
from chaoslight._world._target import own_target


def add_command(commands: Any) -> None:
    replay_parser = commands.add_parser("replay", help="run a failure or schedule file again")
    replay_parser.add_argument(
        "file", help="a failure file from fuzz (a soak's record: each finding), or a schedule file"
    )
    replay_parser.add_argument("target", nargs="?", default=None, help="(default: the file's)")
    replay_parser.add_argument(
        "--world-size", type=int, default=None, help="ranks (default: the file's)"
    )
    replay_parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds a rank may go without progress (default: the file's)",
    )
    replay_parser.add_argument(
        "--check",
        action="append",
        default=None,
        metavar="NAME",
        help="a check instead of the file's named ones, or module:Class to include your own "
        "(repeatable; default: the file's; a file's import path is never imported)",
    )
    replay_parser.add_argument(
        "--html",
        default=None,
        metavar="OUT",
        help="write the replay's timeline to OUT: one self-contained HTML page, a lane per "
        "rank (default: none; the text form is printed for a failure of several ranks)",
    )


def main(args: argparse.Namespace) -> int:
    check_page("--html", args.html)
    failure = Failure.load(args.file)
    target = args.target or own_target(args.file, failure.target, f"chaoslight replay {args.file}")
    console = Console(highlight=False, soft_wrap=True, markup=False)
    findings = soak_failures(args.file)
    if findings is None:
        return _replay_one(args, failure, target, console, args.html)
    # A soak's record: what a user replays is what the soak found, every finding of it.
    every_job = f"every job: chaoslight soak --replay {args.file}"
    if not findings:
        console.print(
            f"chaoslight replay: {args.file} is a soak's record with no finding: its "
            f"hardest job (the most faults fired), once; {every_job}"
        )
        return _replay_one(args, failure, target, console, args.html)
    pages = [_page(args.html, number, len(findings)) for number in range(1, len(findings) + 1)]
    for page in pages:
        check_page("--html", page)
    console.print(
        f"chaoslight replay: {args.file} is a soak's record: its {len(findings)} "
        f"finding{'s' if len(findings) != 1 else ''}, each once; {every_job}"
    )
    statuses = []
    for number, (finding, page) in enumerate(zip(findings, pages, strict=True), 1):
        console.print(f"finding {number} of {len(findings)} (the soak: {finding.status}):")
        statuses.append(_replay_one(args, finding, target, console, page))
    return max(statuses)  # internal (3) over found (1) over clean (0)


def _page(html: str | None, number: int, count: int) -> str | None:
    """The timeline page of finding ``number``: ``--html`` itself for one finding, else
    ``OUT-<number>.html`` beside it."""
    if html is None or count == 1:
        return html
    path = Path(html)
    return str(path.with_name(f"{path.stem}-{number}{path.suffix}"))


def _replay_one(
    args: argparse.Namespace, failure: Failure, target: str, console: Console, html: str | None
) -> int:
    checks, skipped = typed_checks(failure.checks, args.check or [])
    for line in skipped:  # a user check the file names by import path, left out
        console.print(f"chaoslight replay: {line}")
    counted = replay_note(failure.reason) if failure.schedule.memory_budget else None
    if counted is not None:  # a budget's OOM replays exactly where it is counted the same way
        console.print(f"chaoslight replay: {counted}")
    verdict, outcome = replay(
        failure,
        target=target,
        world_size=args.world_size,
        timeout=args.timeout,
        checks=checks,
        trace=True,  # one run: the spans cost little, and the text table needs them
    )
    state = "INTERNAL ERROR of chaoslight" if verdict.internal else "still fails"
    state = state if verdict.failed or verdict.internal else "passes"
    console.print(f"replay: {state} ({outcome.status} in {outcome.wall_s:.2f} s)")
    if verdict.failed or verdict.internal:
        console.print(f"failure: {verdict.reason}")
    console.print("schedule:")
    for line in (failure.schedule.to_text() or "(empty: no fault)").splitlines():
        console.print(f"  {line}")
    for line in verdict.notes:
        console.print(f"note: {line}")
    if verdict.failed or verdict.internal:
        show_cause_traceback(console, outcome)
    page = Path(html) if html else None
    show_timeline(console, outcome, verdict, page, replay_command(args.file, failure))
    if verdict.internal:
        return EXIT_INTERNAL
    return EXIT_FOUND if verdict.failed else EXIT_CLEAN
