"""False alarms and findings of ``chaoslight fuzz`` with default arguments, on the corpus.

    python benchmarks/false_alarms.py                      # 50 examples per program
    python benchmarks/false_alarms.py --examples 100 --seeds 0,1 --file-replays 20

For every program of ``examples/corpus`` (``CORPUS``): the default search on the correct
``train`` (every production fault kind, the default checks plus the entry's own, each run
judged by the oracle) must find nothing — a finding there is a **false alarm**; on the
buggy ``train_buggy`` it must find the bug. Every failure found is then saved to a file
and replayed from it ``--file-replays`` times, each in a fresh World (new processes,
fresh directories): it must fail every time.

Prints one row per program and search, then the totals: false alarms (target 0), buggy
twins found, file replays that reproduced.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import chaoslight  # noqa: E402
from chaoslight._search._campaign import CLEAN  # noqa: E402
from examples.corpus import CORPUS, Entry  # noqa: E402


def campaign(
    entry: Entry, function: str, examples: int, seed: int
) -> tuple[str, str, float, chaoslight.Failure | None]:
    """One default search: (status, first line of the reason, seconds, the failure)."""
    started = time.monotonic()
    result, failure = chaoslight.fuzz(
        entry.target(function),
        world_size=entry.world_size,
        checks=entry.build_checks(),
        max_examples=examples,
        seed=seed,
    )
    reason = failure.reason.splitlines()[0][:110] if failure is not None else ""
    return result.status, reason, time.monotonic() - started, failure


def replays_from_file(entry: Entry, failure: chaoslight.Failure, times: int) -> int:
    """How many of ``times`` replays from the saved file, each in a fresh World, fail. A
    file names the entry's own check by import path, and replay imports nothing a file
    names: the entry's check classes are handed over, as a user would name them."""
    checks = entry.build_checks()
    own = [type(c) for c in checks if not type(c).__module__.startswith("chaoslight.")]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "failure.json"
        failure.save(path)
        loaded = chaoslight.Failure.load(path)
        return sum(chaoslight.replay(loaded, user_checks=own)[0].failed for _ in range(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=50, help="per campaign (%(default)s)")
    parser.add_argument("--seeds", default="0", help="comma-separated (%(default)s)")
    parser.add_argument("--file-replays", type=int, default=20, help="per finding")
    parser.add_argument("--only", default="", help="comma-separated program names")
    args = parser.parse_args()
    chosen = [e for e in CORPUS if not args.only or e.name in args.only.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    false_alarms = found = buggy = reproduced = replayed = 0
    print(f"{'program':<20} {'version':<8} {'seed':>4} {'status':<22} {'s':>6}  reason")
    for entry in chosen:
        for seed in seeds:
            for function in ("train", "train_buggy"):
                status, reason, wall, failure = campaign(entry, function, args.examples, seed)
                print(f"{entry.name:<20} {function[6:] or 'correct':<8} {seed:>4} "
                      f"{status:<22} {wall:6.1f}  {reason}", flush=True)  # fmt: skip
                if function == "train":
                    false_alarms += status != CLEAN
                    continue
                buggy += 1
                found += status != CLEAN
                if failure is not None and args.file_replays:
                    hits = replays_from_file(entry, failure, args.file_replays)
                    reproduced += hits
                    replayed += args.file_replays
                    print(f"{'':<20} replayed from its file in a fresh World: "
                          f"{hits}/{args.file_replays} failed", flush=True)  # fmt: skip
    campaigns = len(chosen) * len(seeds)
    print()
    print(f"false alarms on correct programs: {false_alarms} of {campaigns} campaigns (target 0)")
    print(f"buggy twins found: {found} of {buggy}")
    print(f"file replays in a fresh World that reproduced: {reproduced}/{replayed}")


if __name__ == "__main__":
    main()
