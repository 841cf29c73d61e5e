"""What the default search needs to find each bug of the catalogue (``examples/catalogue``).

    python benchmarks/catalogue.py                      # 100 examples per search, seed 0
    python benchmarks/catalogue.py --only shared_file --seed 1
    python benchmarks/catalogue.py --robust-examples 300

For every entry of ``CATALOGUE``: ``chaoslight.fuzz`` on each buggy function with default
arguments (plus the entry's ``checks``), on one shared 2-rank World, and the examples and
seconds it took until the first failing run (baseline and probes included; shrinking and
replays after it are not). Entries the default search cannot find (a memory budget) are
searched anyway, to record the miss, then run once under their schedule file. Then the
fixed twins (``--fixed-examples`` each), and the robust program under a long search.
Prints one table row per search: the README's table is this output.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import chaoslight  # noqa: E402
from chaoslight.checks import check_by_name  # noqa: E402
from examples.catalogue import CATALOGUE, HERE, ROBUST, Entry  # noqa: E402

FOUND_PHASES = ("shrinking", "minimising", "replaying")


class FirstFailure:
    """A campaign display that remembers the examples and seconds at the first failure."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.examples: int | None = None
        self.seconds: float | None = None

    def __enter__(self) -> FirstFailure:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, progress: Any) -> None:
        if self.examples is None and progress.phase in FOUND_PHASES:
            self.examples = progress.examples
            self.seconds = time.monotonic() - self.started


def search(entry: Entry, function: str, world: Any, args: argparse.Namespace, examples: int) -> str:
    """One default search; a table row."""
    shown = FirstFailure()
    result, _ = chaoslight.fuzz(
        entry.target(function),
        checks=[*chaoslight._search.DEFAULT_CHECKS, *entry.checks] if entry.checks else None,
        max_examples=examples,
        max_time=args.max_time,
        seed=args.seed,
        timeout=entry.timeout,
        replays=args.replays,
        display=shown,
        world=world,
    )
    found, total, schedule = cells(result, shown)
    return f"| `{entry.name}:{function}` | {result.status} | {found} | {total} | {schedule} |"


def cells(result: Any, shown: FirstFailure) -> tuple[str, str, str]:
    """A search's table cells: its first failure, the whole campaign, the schedule."""
    schedule = "; ".join(result.schedule.to_text().splitlines()) if result.schedule else ""
    if result.schedule is not None and not result.schedule.faults:
        schedule = "(no fault)"
    found = f"{shown.examples} / {shown.seconds:.1f} s" if shown.examples is not None else "—"
    return found, f"{result.examples} / {result.wall_s:.1f} s", schedule


def under_schedule(entry: Entry, function: str, world: Any) -> str:
    """One run under the entry's schedule file, judged by the oracle; a table row."""
    assert entry.schedule_file is not None
    schedule = chaoslight.Schedule.load(HERE / entry.schedule_file)
    started = time.monotonic()
    checks = [check_by_name(name) for name in chaoslight._search.DEFAULT_CHECKS]
    outcome = world.run(entry.target(function), schedule, timeout=entry.timeout, checks=checks)
    verdict = chaoslight.judge(outcome)
    wall = time.monotonic() - started
    status = "failed" if verdict.failed else "passed"
    reason = verdict.reason.split(". ")[0][:70]
    row = f"| `{entry.name}:{function}` | replay {entry.schedule_file}: {status}"
    return f"{row} | 1 / {wall:.1f} s | | {reason} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100, help="per buggy search")
    parser.add_argument("--fixed-examples", type=int, default=20, help="per fixed twin")
    parser.add_argument("--robust-examples", type=int, default=300, help="the robust program")
    parser.add_argument("--max-time", type=float, default=None, help="seconds per search")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--replays", type=int, default=1)
    parser.add_argument("--only", default="", help="comma-separated entry names")
    args = parser.parse_args()
    chosen = [e for e in (*CATALOGUE, ROBUST) if not args.only or e.name in args.only.split(",")]
    print("| search | status | first failure: examples / time | whole campaign | schedule |")
    print("|---|---|---|---|---|")
    with chaoslight.World(size=2) as world:
        world.run(ROBUST.target(ROBUST.fixed), timeout=60)  # warm: imports, first fit
        for entry in chosen:
            for function in entry.buggy:
                print(search(entry, function, world, args, args.examples), flush=True)
                if entry.schedule_file is not None:
                    print(under_schedule(entry, function, world), flush=True)
            examples = args.robust_examples if entry is ROBUST else args.fixed_examples
            print(search(entry, entry.fixed, world, args, examples), flush=True)
            if entry.schedule_file is not None:
                print(under_schedule(entry, entry.fixed, world), flush=True)


if __name__ == "__main__":
    main()
