"""False alarms and the desync verdict on an oversubscribed machine: verdicts do not depend on load.

    python benchmarks/loaded.py                               # every program, 10 examples each
    python benchmarks/loaded.py --examples 20 --busy 6
    python benchmarks/loaded.py --only metrics_sync,gan_manual --desync-runs 20
    python benchmarks/loaded.py --sets shapes --first 10      # the first 10 shapes only

1. False alarms under load: the default search (``chaoslight.fuzz``, every production fault
   kind, the default checks plus an entry's own) on the correct programs of
   ``examples/corpus`` (``train``) and ``examples/shapes``, each campaign run while ``--busy``
   processes spin (plain ``while True: pass`` loops; 4 on this 2-core machine leave each
   rank about a third of a core). Every finding is a **false alarm** (target 0): a correct
   rank that is starved must never be called blocked.
2. The desync verdict, unloaded and loaded side by side: in one warm 2-rank World, the
   mismatched-collective program (``mismatched`` below: an all-reduce against a barrier,
   hung from its second collective on) is run ``--desync-runs`` times without and with the
   busy processes, interleaved. Its wall time bounds the time from the hang to the verdict
   (the hang comes milliseconds after the example starts). Targets: within 2 s unloaded,
   5 s loaded.

Each campaign, and the desync part as a whole, holds the shared lock (``--lock``) while it
runs; the busy processes run only while it is held, so others' short runs interleave.
Prints one row per campaign, then the totals and the desync table.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import false_alarms  # noqa: E402
import shapes  # noqa: E402

from chaoslight._search._campaign import CLEAN  # noqa: E402
from examples.corpus import CORPUS  # noqa: E402
from examples.shapes import SHAPES  # noqa: E402

MISMATCHED = f"{Path(__file__).resolve()}:mismatched"
LOCK = "/tmp/chaoslight-multirank.lock"


def mismatched() -> None:
    """The target: one all-reduce together, then rank 0 all-reduces where rank 1 waits at a
    barrier (both their collective #2): hung, nothing will ever release either."""
    import torch
    import torch.distributed as dist

    tensor = torch.ones(4)
    dist.all_reduce(tensor)
    if dist.get_rank() == 0:
        dist.all_reduce(tensor)
    else:
        dist.barrier()


@contextlib.contextmanager
def locked(path: str) -> Iterator[None]:
    """Hold the shared multi-rank lock (none with an empty path)."""
    if not path:
        yield
        return
    with open(path, "a") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


@contextlib.contextmanager
def busy(count: int) -> Iterator[None]:
    """``count`` processes spinning on a CPU each for the block; killed after it."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()


def programs(sets: list[str], only: list[str], first: int | None) -> list[tuple[str, str]]:
    """(set, name) of every program chosen, the corpus first."""
    chosen = [("corpus", e.name) for e in CORPUS if "corpus" in sets]
    chosen += [("shapes", name) for name in SHAPES if "shapes" in sets]
    chosen = [(s, name) for s, name in chosen if not only or name in only]
    return chosen[:first] if first else chosen


def campaign(kind: str, name: str, examples: int, seed: int) -> tuple[str, str, float]:
    """One default search of a correct program: (status, first line of the reason, seconds)."""
    if kind == "corpus":
        entry = next(e for e in CORPUS if e.name == name)
        status, reason, wall, _ = false_alarms.campaign(entry, "train", examples, seed)
    else:
        status, reason, wall, _ = shapes.campaign(name, examples, seed)
    return status, reason, wall


def desync_times(runs: int, count: int, timeout: float) -> tuple[list[float], list[float]]:
    """Wall times of the mismatched program, unloaded and loaded, interleaved in one World;
    each must be reported hung at the wavefront."""
    from chaoslight._world import World

    unloaded: list[float] = []
    loaded: list[float] = []
    with World(size=2) as world:
        world.start(timeout=timeout)
        for _ in range(runs):
            for times, spinners in ((unloaded, 0), (loaded, count)):
                with busy(spinners):
                    time.sleep(0.5 if spinners else 0.0)  # let the load settle in
                    outcome = world.run(MISMATCHED, timeout=timeout)
                if outcome.status != "hung" or "collectives differ" not in str(outcome.evidence):
                    raise SystemExit(outcome.report())
                times.append(outcome.wall_s)
    return unloaded, loaded


def summary(times: list[float]) -> str:
    return (
        f"{statistics.median(times):6.2f} {statistics.mean(times):6.2f} {max(times):6.2f} "
        f"{len(times):>3}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--examples", type=int, default=10, help="per campaign (%(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sets", default="corpus,shapes", help="comma-separated (%(default)s)")
    parser.add_argument("--only", default="", help="comma-separated program names")
    parser.add_argument("--first", type=int, default=None, help="only the first N programs")
    parser.add_argument("--busy", type=int, default=4, help="spinning processes (%(default)s)")
    parser.add_argument("--desync-runs", type=int, default=10, help="each way (%(default)s)")
    parser.add_argument("--timeout", type=float, default=30.0, help="for the desync runs")
    parser.add_argument("--lock", default=LOCK, help="shared lock file ('' for none)")
    args = parser.parse_args()
    chosen = programs(args.sets.split(","), [n for n in args.only.split(",") if n], args.first)

    print(f"{os.cpu_count()} cores, {args.busy} busy processes during every campaign")
    print(f"{'set':<7} {'program':<24} {'status':<22} {'s':>6}  reason")
    false_alarm = errors = 0
    started = time.monotonic()
    for kind, name in chosen:
        with locked(args.lock), busy(args.busy):
            try:
                status, reason, wall = campaign(kind, name, args.examples, args.seed)
            except Exception as exc:  # a campaign that broke is no verdict: counted apart
                status, reason, wall = "error", f"{type(exc).__name__}: {exc}"[:110], 0.0
        errors += status == "error"
        false_alarm += status not in (CLEAN, "error")
        print(f"{kind:<7} {name:<24} {status:<22} {wall:6.1f}  {reason}", flush=True)
    print(
        f"\nfalse alarms on correct programs under load: {false_alarm} of {len(chosen)} "
        f"campaigns, {args.examples} examples each, seed {args.seed} (target 0); "
        f"{errors} campaigns broke; {time.monotonic() - started:.0f} s"
    )
    if args.desync_runs:
        with locked(args.lock):
            unloaded, loaded = desync_times(args.desync_runs, args.busy, args.timeout)
        print(f"\ndesync verdict, {MISMATCHED.rsplit('/', 1)[-1]}, timeout {args.timeout:g} s")
        print(f"{'':<28} {'median':>6} {'mean':>6} {'max':>6} {'n':>3}  target")
        print(f"{'unloaded':<28} {summary(unloaded)}  max ≤ 2 s")
        print(f"{f'loaded ({args.busy} busy processes)':<28} {summary(loaded)}  max ≤ 5 s")


if __name__ == "__main__":
    main()
