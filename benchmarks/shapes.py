"""False alarms of ``chaoslight fuzz`` with default arguments, on the shapes.

    python benchmarks/shapes.py                              # 40 examples, seed 0
    python benchmarks/shapes.py --examples 100 --seeds 0,1
    python benchmarks/shapes.py --only gan_manual,ema_callback

Every program of ``examples/shapes`` (``SHAPES``) is a correct 2-rank Lightning program
chaoslight's own tests were not written against. The default search (every production
fault kind, the default checks, each run judged by the oracle) must find nothing on any
of them: every finding is a **false alarm**. A known issue of the framework (reported
apart, exit status 0 on the command line) is not one.

Prints one row per program and seed (status, seconds, the first line of the reason),
then the total of false alarms (target 0).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import chaoslight  # noqa: E402
from chaoslight._search._campaign import CLEAN  # noqa: E402
from examples.shapes import SHAPES, target  # noqa: E402


def campaign(name: str, examples: int, seed: int) -> tuple[str, str, float, int]:
    """One default search of a shape: (status, first line of the reason, seconds, known
    framework issues met)."""
    started = time.monotonic()
    result, failure = chaoslight.fuzz(target(name), max_examples=examples, seed=seed)
    reason = failure.reason.splitlines()[0][:110] if failure is not None else ""
    return result.status, reason, time.monotonic() - started, len(result.known)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=40, help="per campaign (%(default)s)")
    parser.add_argument("--seeds", default="0", help="comma-separated (%(default)s)")
    parser.add_argument("--only", default="", help="comma-separated program names")
    args = parser.parse_args()
    chosen = [name for name in SHAPES if not args.only or name in args.only.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    false_alarms = 0
    print(f"{'program':<24} {'seed':>4} {'status':<22} {'s':>6} {'known':>5}  reason")
    for name in chosen:
        for seed in seeds:
            status, reason, wall, known = campaign(name, args.examples, seed)
            false_alarms += status != CLEAN
            print(f"{name:<24} {seed:>4} {status:<22} {wall:6.1f} {known:>5}  {reason}", flush=True)
    print()
    print(
        f"false alarms on correct programs: {false_alarms} of "
        f"{len(chosen) * len(seeds)} campaigns (target 0)"
    )


if __name__ == "__main__":
    main()
