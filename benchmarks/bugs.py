"""What the default search finds on ``examples/bugs`` (programs chaoslight was not tuned on).

    python benchmarks/bugs.py                         # 60 examples per buggy search, seed 0
    python benchmarks/bugs.py --only gan_skip_step,polled_file_fallback --seed 1
    python benchmarks/bugs.py --examples 100 --fixed-examples 40 --max-time 300

For every name in ``examples.bugs.BUGS``: ``chaoslight.fuzz`` with default arguments on
``train_buggy`` (``--examples``) and then on its corrected twin ``train_fixed``
(``--fixed-examples``), on one shared 2-rank World (warmed first), with ``replays=1``.
Prints one table row per search (status, the examples and seconds until the first
failing run, the whole campaign, the minimal schedule, the first 120 characters of the
verdict) and, at the end, the totals: buggy programs found and fixed twins clean.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from catalogue import FirstFailure, cells  # noqa: E402  (benchmarks/catalogue.py)

import chaoslight  # noqa: E402
from examples.bugs import BUGS, HERE  # noqa: E402

CLEAN = "clean"


def search(name: str, function: str, world: Any, args: argparse.Namespace, examples: int) -> str:
    """One default search of ``name:function``; returns its status and prints a table row."""
    shown = FirstFailure()
    result, _ = chaoslight.fuzz(
        f"{HERE / name}.py:{function}",
        max_examples=examples,
        max_time=args.max_time,
        seed=args.seed,
        replays=args.replays,
        display=shown,
        world=world,
    )
    found, total, schedule = cells(result, shown)
    reason = result.verdict.reason if result.verdict is not None and result.verdict.failed else ""
    reason = " ".join(reason.split())[:120].replace("|", "/")
    print(
        f"| `{name}:{function}` | {result.status} | {found} | {total} | {schedule} | {reason} |",
        flush=True,
    )
    return str(result.status)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=60, help="per buggy search")
    parser.add_argument("--fixed-examples", type=int, default=40, help="per fixed twin")
    parser.add_argument("--max-time", type=float, default=None, help="seconds per search")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--replays", type=int, default=1)
    parser.add_argument("--only", default="", help="comma-separated program names")
    args = parser.parse_args()
    chosen = [name for name in BUGS if not args.only or name in args.only.split(",")]
    print(
        "| search | status | first failure: examples / time | whole campaign | schedule | verdict |"
    )
    print("|---|---|---|---|---|---|")
    found = clean = 0
    with chaoslight.World(size=2) as world:
        world.run(f"{HERE / chosen[0]}.py:train_fixed", timeout=60)  # warm: imports, first fit
        for name in chosen:
            found += search(name, "train_buggy", world, args, args.examples) != CLEAN
            clean += search(name, "train_fixed", world, args, args.fixed_examples) == CLEAN
    print(
        f"\ntotals: {found} of {len(chosen)} bugs found; {clean} of {len(chosen)} fixed twins clean"
    )


if __name__ == "__main__":
    main()
