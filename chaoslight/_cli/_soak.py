"""``chaoslight soak TARGET --mtbf S --duration S``: a kill loop, drawn from a seed and
recorded; ``chaoslight soak --replay FILE`` runs a soak's every job again.

Exit status: 0 clean, 1 a finding (or, with ``--replay``, a job that fails now), 2 a
usage error, 3 an internal error of chaoslight (the watchdog included), 4 the workers did
not start, 130 interrupted (Ctrl-C) with nothing found so far.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from chaoslight._cli._arguments import add_world_options, search_settings
from chaoslight._cli._outputs import Outputs
from chaoslight._cli._progress import PLAIN_EVERY_S
from chaoslight._cli._usage import (
    EXIT_CLEAN,
    EXIT_FOUND,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    UsageError,
)
from chaoslight._search._failure import replay_command
from chaoslight._search._kinds import DEFAULT_KINDS
from chaoslight._search._soak import SoakProgress, soak
from chaoslight._search._soak_record import (
    INTERRUPTED,
    STOPPED_INTERNAL,
    WATCHDOG,
    JobReplay,
    SoakResult,
    load_soak,
    replay_soak,
)
from chaoslight._search._statuses import BASELINE, FLAKY, INTERNAL_ERROR
from chaoslight._world._target import own_target

SEED_RANGE = 2**31
FINDING_LABELS: dict[str, str] = {
    FLAKY: "FLAKY (not reproduced in a fresh World)",
    BASELINE: "fails with no fault injected",
    INTERNAL_ERROR: "INTERNAL ERROR of chaoslight (not a finding; please report it)",
}


def add_command(commands: Any) -> None:
    parser = commands.add_parser(
        "soak",
        help="run TARGET job after job under faults at random intervals; record and judge all",
        description="torchft's kill loop, deterministic and recorded: faults of the default "
        f"kinds ({', '.join(DEFAULT_KINDS)}) arrive at exponential intervals (mean --mtbf "
        "seconds, drawn from --seed) at the (site, step) points the fault-free run reaches; "
        "a job a fault ended is restarted, as a cluster requeues it; every run is judged by "
        "the oracle and the checks. The whole soak is written to --out: `chaoslight replay "
        "FILE` runs each finding (shrunk), `chaoslight soak --replay FILE` every job. "
        "Exit 0: clean; 1: a finding; 2: usage error; 3: internal error; 130: Ctrl-C.",
    )
    parser.add_argument(
        "target", nargs="?", default=None, help="path/file.py:function or pkg.module:function"
    )
    parser.add_argument(
        "--mtbf",
        type=float,
        default=None,
        metavar="SECONDS",
        help="mean seconds between faults (required, unless --replay)",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="SECONDS",
        help="seconds to soak, from the first job; the job running then finishes (and a new "
        "finding is shrunk, at most 2 minutes more) (required, unless --replay)",
    )
    add_world_options(parser)
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        metavar="N",
        help="the seed every interval and fault is drawn from: the same seed, the same soak "
        "(default: a random one, printed and recorded)",
    )
    parser.add_argument(
        "--out", default="chaoslight-soak.json", metavar="FILE", help="the soak's record"
    )
    parser.add_argument(
        "--replay",
        default=None,
        metavar="FILE",
        help="run every job of a soak's record again, in order, judged as the soak judged "
        "them (default: soak TARGET)",
    )


def soak_command(args: argparse.Namespace) -> int:
    if args.replay is not None:
        return _replay(args)
    if args.target is None:
        raise UsageError(
            "soak needs a TARGET, e.g. chaoslight soak train.py:main --mtbf 5 "
            "--duration 600 (or --replay FILE)"
        )
    for name in ("mtbf", "duration"):
        if getattr(args, name) is None:
            raise UsageError(f"soak needs --{name} SECONDS, e.g. --mtbf 5 --duration 600")
    outputs = Outputs(argparse.Namespace(out=args.out, no_html=True, emit_test=None))
    seed = args.seed if args.seed is not None else random.randrange(SEED_RANGE)
    settings = search_settings(args).replace(seed=seed)
    console = Console(highlight=False, soft_wrap=True, markup=False)
    title = f"{args.target} (world size {settings.world_size}, mtbf {args.mtbf:g} s, seed {seed})"
    with SoakDisplay(title, args.duration) as display:
        result = soak(
            args.target,
            settings,
            mtbf=args.mtbf,
            duration=args.duration,
            seed=seed,
            on_progress=display.update,
        )
    out = outputs.failure_file()
    result.save(out)
    _summary(console, result, out)
    if result.stopped in (STOPPED_INTERNAL, WATCHDOG):
        return EXIT_INTERNAL
    if result.failed:
        return EXIT_FOUND
    return EXIT_INTERRUPTED if result.stopped == INTERRUPTED else EXIT_CLEAN


def _summary(console: Console, result: SoakResult, out: Path) -> None:
    kinds = result.faults_by_kind()
    fired = ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items())) or "none"
    ended = {
        INTERRUPTED: "interrupted (Ctrl-C): the summary so far",
        WATCHDOG: "stopped by the watchdog (a run past any bound a job takes: chaoslight's "
        "bug, not a finding)",
    }.get(result.stopped, "")
    console.print(
        f"chaoslight soak: {len(result.jobs)} jobs in {result.elapsed_s:.0f} s (seed "
        f"{result.seed}, mtbf {result.mtbf:g} s, a job {result.job_seconds:.1f} s)"
        + (f", {ended}" if ended else "")
    )
    console.print(f"faults fired: {sum(kinds.values())} ({fired})")
    for key, count in sorted(result.known.items()):
        console.print(f"known framework issue {key}: {count} jobs (not a finding)")
    if not result.findings:
        console.print("findings: none")
    for number, finding in enumerate(result.findings, 1):
        label = FINDING_LABELS.get(finding.status, "failure")
        console.print(
            f"finding {number}: {label}, first in job {finding.job}, in {finding.count} "
            f"job{'s' if finding.count != 1 else ''}"
        )
        console.print(f"  failure: {finding.reason}")
        shrunk = "minimal schedule" if finding.minimal is not None else "schedule (not shrunk)"
        console.print(f"  {shrunk}:")
        for line in (finding.best.to_text() or "(empty: no fault)").splitlines():
            console.print(f"    {line}")
    console.print(f"written to {out}")
    headline = result.headline()
    console.print(
        f"replay the finding{'s' if len(result.findings) > 1 else ''}: "
        f"{replay_command(out, headline)}"
        if result.findings
        else f"replay: {replay_command(out, headline)}"
    )
    console.print(f"replay every job: chaoslight soak --replay {out}")


def _replay(args: argparse.Namespace) -> int:
    failure, section, records = load_soak(args.replay)
    rerun = f"chaoslight soak --replay {args.replay}"
    target = args.target or own_target(args.replay, failure.target, rerun)
    console = Console(highlight=False, soft_wrap=True, markup=False)
    console.print(f"chaoslight soak --replay: {len(records)} jobs of {args.replay} on {target}")

    def show(replayed: JobReplay) -> None:
        if replayed.differs or replayed.failed:
            was = "failed" if replayed.record.failed else "passed"
            now = "fails" if replayed.failed else "passes"
            console.print(f"job {replayed.index}: {now} now (the soak: {was})")
            if replayed.failed:
                console.print(f"  failure: {replayed.verdict.reason}")

    replayed = replay_soak(args.replay, target=target, on_job=show)
    differ = sum(r.differs for r in replayed)
    failing = sum(r.failed for r in replayed)
    console.print(
        f"replayed {len(replayed)} jobs (seed {section.get('seed')}): {failing} fail now, "
        f"{differ} differ from the record"
    )
    return EXIT_FOUND if failing else EXIT_CLEAN


class SoakDisplay:
    """Elapsed time, jobs, faults fired and findings: a live rich panel on a terminal,
    a plain line every few seconds in a CI log."""

    def __init__(self, title: str, duration: float, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True, highlight=False)
        self.title, self.duration = title, duration
        self.live: Live | None = None
        self.progress: SoakProgress | None = None
        self._last_line = 0.0

    def __enter__(self) -> SoakDisplay:
        if self.console.is_terminal:
            self.live = Live(self._panel(), console=self.console, refresh_per_second=4)
            self.live.__enter__()
        else:
            self.console.print(f"chaoslight soak: {self.title}", markup=False, soft_wrap=True)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.update(self._panel())  # the last frame stays, with the final counts
            self.live.__exit__(None, None, None)
        elif self.progress is not None:
            self.console.print(self._line(), markup=False, soft_wrap=True)

    def update(self, progress: SoakProgress) -> None:
        self.progress = progress
        if self.live is not None:
            self.live.update(self._panel())
        elif progress.elapsed - self._last_line >= PLAIN_EVERY_S:
            self._last_line = progress.elapsed
            self.console.print(self._line(), markup=False, soft_wrap=True)

    def _counts(self) -> list[tuple[str, str]]:
        progress = self.progress
        if progress is None:
            return [("phase", "starting the World")]
        return [
            ("phase", progress.phase),
            ("elapsed", f"{progress.elapsed:.0f} s of {self.duration:g} s"),
            ("jobs run", str(progress.jobs)),
            ("faults fired", str(progress.fired)),
            ("findings", str(progress.findings)),
        ]

    def _line(self) -> str:
        (_, phase), *counts = self._counts()
        rest = " ".join(f"{name.replace(' ', '_')}={value}" for name, value in counts)
        return f"chaoslight soak: [{phase}] {rest}"

    def _panel(self) -> Group:
        title = Text(f"chaoslight soak {self.title}", style="bold", no_wrap=True)
        title.overflow = "ellipsis"
        table = Table(show_header=False, box=None, padding=(0, 1))
        table.add_column(style="bold", no_wrap=True)
        table.add_column(no_wrap=True)
        for name, value in self._counts():
            table.add_row(name, value)
        return Group(title, table)
