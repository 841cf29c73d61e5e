"""How fast a World starts, and gets going again after a rank dies: ranks forked from a
per-rank fork server (``World(fork=True)``, the default on Linux) against ranks started as
fresh interpreters (``fork=False``).

    python benchmarks/respawn.py [--crashes 6] [--rounds 2]

For each way, in alternating rounds in one run (so a busy machine slows both alike):

1. start: ``World(size=2)`` created until its first example (``examples/ddp_train.py:train``)
   has passed, the imports included;
2. crash storm: ``--crashes`` examples in a row, each SIGKILLing rank 1 at its second
   training step, every one followed by a passing example; the time of each pair counts
   the dead rank's replacement. A fuzz campaign meets this whenever it draws hard faults;
3. renew (forked rounds): ``world.renew()`` and a passing example, the new rank processes a
   found failure's first replay runs on, against what a new World costs for the same (1.).

Prints the median of each, and the ratio fresh/forked (new World/renew for 3.). Run it
with nothing else on the machine (it takes both cores for a minute or two).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import chaoslight  # noqa: E402
from chaoslight._world._forkserver import supported  # noqa: E402

TARGET = f"{ROOT}/examples/ddp_train.py:train"
CRASH = chaoslight.Schedule([chaoslight.Crash(site="lightning.training_step", rank=1, step=1)])


def one_round(fork: bool, crashes: int) -> tuple[float, list[float], float]:
    """The start time, each crash-then-pass pair's time, and a renew-then-pass time (forked
    only; 0 otherwise) of one World."""
    began = time.perf_counter()
    with chaoslight.World(size=2, fork=fork) as world:
        first = world.run(TARGET, timeout=60)
        assert first.status == "passed", first.report()
        start = time.perf_counter() - began
        pairs = []
        for _ in range(crashes):
            began = time.perf_counter()
            crashed = world.run(TARGET, CRASH, timeout=60)
            passed = world.run(TARGET, timeout=60)
            pairs.append(time.perf_counter() - began)
            assert crashed.status == "crashed", crashed.report()
            assert passed.status == "passed", passed.report()
        renew = 0.0
        if fork:
            began = time.perf_counter()
            renewed = world.renew().run(TARGET, timeout=60)
            renew = time.perf_counter() - began
            assert renewed.status == "passed", renewed.report()
    return start, pairs, renew


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--crashes", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if not supported():
        print("fork servers are not supported here (Linux with pidfd_open): nothing to compare")
        return
    starts: dict[bool, list[float]] = {True: [], False: []}
    pairs: dict[bool, list[float]] = {True: [], False: []}
    renews: list[float] = []
    for _ in range(args.rounds):
        for fork in (True, False):
            start, times, renew = one_round(fork, args.crashes)
            starts[fork].append(start)
            pairs[fork].extend(times)
            renews += [renew] if fork else []
    print(f"target {TARGET}: 2 ranks, gloo on CPU; {args.rounds} rounds of each way")
    for label, data in (("start to first pass", starts), ("crash + pass pair", pairs)):
        forked, fresh = statistics.median(data[True]), statistics.median(data[False])
        print(
            f"{label:>22}: forked {forked:6.2f} s, fresh interpreters {fresh:6.2f} s "
            f"(median of {len(data[True])}): {fresh / forked:.1f}x"
        )
    renew, new_world = statistics.median(renews), statistics.median(starts[True])
    print(
        f"{'new ranks + pass':>22}: renew {renew:6.2f} s, a new World {new_world:6.2f} s "
        f"(median of {len(renews)}): {new_world / renew:.1f}x"
    )


if __name__ == "__main__":
    main()
