"""How many examples a minute a World runs, against fresh processes and against plain fits.

    python benchmarks/world_throughput.py [--rounds 12] [--per-round 5] [--fresh 3]

Three measurements of the same target (``examples/ddp_train.py:train``: a tiny model,
4 steps, 2 ranks, gloo on CPU), all in one run of this script:

1. fresh: per example, start 2 processes that import Lightning, create the gloo group,
   fit once and exit (the cost of a new DDP job per example; torchrun would add more);
2. plain: 2 long-lived processes fitting back to back, timed inside rank 0 (the floor);
3. World: ``world.run`` in a warm ``chaoslight.World(size=2)``, timed in the caller
   (everything included: messages, injection with every collective observed, the
   watchdog, restoring state, collecting events).

Plain and World rounds alternate, both pools alive, so a busy machine slows both alike.
Prints examples/minute for World and fresh (target ratio >= 50x) and the World's
per-example overhead over the plain fits (target <= 20 %).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TARGET = f"{ROOT}/examples/ddp_train.py:train"
SIZE = 2
WARMUP = 5


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def rank_main(rank: int, port: int) -> None:
    """One rank of a plain DDP job: for each line ``N`` on stdin, fit N times back to back."""
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(SIZE),
        LOCAL_WORLD_SIZE=str(SIZE),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    import torch.distributed as dist

    sys.path.insert(0, str(ROOT / "examples"))
    from ddp_train import train

    dist.init_process_group(
        "gloo", rank=rank, world_size=SIZE, timeout=datetime.timedelta(seconds=60)
    )
    out, sys.stdout = sys.stdout, open(os.devnull, "w")  # noqa: SIM115 - Lightning's chatter
    for line in sys.stdin:
        times = []
        for _ in range(int(line)):
            start = time.perf_counter()
            train()
            times.append(time.perf_counter() - start)
        out.write(json.dumps(times) + "\n")
        out.flush()


class PlainJob:
    """A plain 2-rank DDP job (no chaoslight) whose ranks fit on demand."""

    def __init__(self) -> None:
        port = free_port()
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        self.procs = [
            subprocess.Popen(
                [sys.executable, __file__, "--rank", str(rank), "--port", str(port)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=env,
            )
            for rank in range(SIZE)
        ]

    def fit(self, count: int) -> list[float]:
        """Fit ``count`` times back to back in every rank; rank 0's time for each fit."""
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write(f"{count}\n")
            proc.stdin.flush()
        replies = [json.loads(proc.stdout.readline()) for proc in self.procs]  # type: ignore[union-attr]
        return list(replies[0])

    def close(self) -> None:
        for proc in self.procs:
            proc.communicate()


def fresh_example() -> float:
    """Wall time of a new 2-rank job that imports everything, fits once and exits."""
    start = time.perf_counter()
    job = PlainJob()
    job.fit(1)
    job.close()
    return time.perf_counter() - start


def warm(rounds: int, per_round: int) -> tuple[list[float], list[float]]:
    """Alternate rounds of plain back-to-back fits and World examples; their times."""
    from chaoslight._world import World

    plain: list[float] = []
    world_times: list[float] = []
    job = PlainJob()
    try:
        with World(size=SIZE) as world:
            world.start()
            job.fit(WARMUP)
            for _ in range(WARMUP):
                world.run(TARGET, timeout=30)
            for _ in range(rounds):
                plain += job.fit(per_round)
                world_times += [timed_run(world) for _ in range(per_round)]
    finally:
        job.close()
    return plain, world_times


def timed_run(world: Any) -> float:
    start = time.perf_counter()
    outcome = world.run(TARGET, timeout=30)
    elapsed = time.perf_counter() - start
    if not outcome.passed:
        raise SystemExit(outcome.report())
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--per-round", type=int, default=5)
    parser.add_argument("--fresh", type=int, default=3)
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank is not None:
        rank_main(args.rank, args.port)
        return
    fresh = [fresh_example() for _ in range(args.fresh)]
    plain, world = warm(args.rounds, args.per_round)
    report(fresh, plain, world)


def report(fresh: list[float], plain: list[float], world: list[float]) -> None:
    rows = {"fresh": fresh, "plain": plain, "world": world}
    print(f"target {TARGET}: {SIZE} ranks, gloo on CPU, {os.cpu_count()} cores")
    for name, times in rows.items():
        mean, median = statistics.mean(times), statistics.median(times)
        print(
            f"  {name:<6} {mean * 1000:8.1f} ms/example mean {median * 1000:8.1f} median "
            f"= {60 / mean:7.1f} examples/min (n={len(times)})"
        )
    ratio = statistics.mean(fresh) / statistics.mean(world)
    print(f"World vs fresh processes per example: {ratio:.0f}x the examples/minute (target >= 50x)")
    for label, pick in (("mean", statistics.mean), ("median", statistics.median)):
        overhead = pick(world) / pick(plain) - 1
        print(
            f"World overhead over plain back-to-back fits ({label}): {overhead:+.1%} "
            "(target <= 20 %)"
        )


if __name__ == "__main__":
    main()
