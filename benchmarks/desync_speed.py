"""How fast a World reports a desync, with hangs seen at the wavefront and without.

    python benchmarks/desync_speed.py [--timeout 30] [--before 3] [--after 20]

The desyncing program (``desync`` below): a tiny Lightning DDP fit, 2 ranks, gloo on CPU,
in which rank 0 "exports" behind a barrier after batch 1 while rank 1 goes on to the next
batch's SIGTERM broadcast. In one warm ``World(size=2)``, all in one run of this script:

1. before: hangs found only by the ranks' watchdogs (``_example.WAVEFRONT = False``),
   which wait ``--timeout`` seconds without progress;
2. after: the World sees every rank blocked in a different collective and reports at once;
3. short timeout, before: the old way to make hangs cheap (``--short-timeout``), at the
   price of calling any straggler that long a hang.

Prints the time to report the desync and examples/minute, with the ratios side by side.
(What the workers' extra looks at their main thread cost a passing example is what
``benchmarks/world_throughput.py`` measures: the World against plain fits.)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))  # for the target, loaded in the ranks

DESYNC = f"{Path(__file__).resolve()}:desync"
WARMUP = f"{ROOT}/examples/ddp_train.py:train"


def desync() -> None:
    """The target: rank 0 waits at a barrier, rank 1 in Lightning's SIGTERM broadcast."""
    import torch.distributed as dist
    from ddp_train import TinyRegression, loader, trainer

    class ExportOnRankZero(TinyRegression):
        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            if self.trainer.global_rank == 0 and batch_idx == 1:
                dist.barrier()  # "export": a barrier no other rank reaches

    trainer().fit(ExportOnRankZero(), loader())


def runs(world: Any, text: str, count: int, timeout: float, wavefront: bool) -> list[float]:
    """Wall times of ``count`` examples, with the wavefront on or off; each must be as
    expected (the desync hung, the warm-up target passed)."""
    from chaoslight._world import _example

    _example.WAVEFRONT = wavefront
    times = []
    try:
        for _ in range(count):
            start = time.perf_counter()
            outcome = world.run(text, timeout=timeout)
            times.append(time.perf_counter() - start)
            expected = "passed" if text == WARMUP else "hung"
            if outcome.status != expected:
                raise SystemExit(outcome.report())
    finally:
        _example.WAVEFRONT = True
    return times


def row(label: str, times: list[float]) -> float:
    mean = statistics.mean(times)
    print(
        f"  {label:<34} {mean:8.2f} s/example mean {statistics.median(times):8.2f} median "
        f"= {60 / mean:8.1f} examples/min (n={len(times)})"
    )
    return mean


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--short-timeout", type=float, default=2.0)
    parser.add_argument("--before", type=int, default=3, help="desync examples, wavefront off")
    parser.add_argument("--after", type=int, default=20, help="desync examples, wavefront on")
    args = parser.parse_args()

    from chaoslight._world import World

    with World(size=2) as world:
        world.start(timeout=args.timeout)
        runs(world, WARMUP, 3, args.timeout, True)
        after = runs(world, DESYNC, args.after, args.timeout, True)
        before = runs(world, DESYNC, args.before, args.timeout, False)
        short = runs(world, DESYNC, args.before, args.short_timeout, False)

    print(f"desync {DESYNC}: 2 ranks, gloo on CPU, {os.cpu_count()} cores")
    b = row(f"before, timeout {args.timeout:g} s", before)
    s = row(f"before, timeout {args.short_timeout:g} s", short)
    a = row(f"after (wavefront), timeout {args.timeout:g} s", after)
    print(
        f"time to report the desync: {b:.2f} s before, {a:.2f} s after = {b / a:.1f}x faster "
        f"({a / args.timeout:.1%} of the {args.timeout:g} s timeout)"
    )
    print(
        f"desync examples/min: {60 / b:.1f} before, {60 / a:.1f} after = {b / a:.1f}x; "
        f"{60 / s:.1f} with a {args.short_timeout:g} s timeout = {s / a:.1f}x"
    )


if __name__ == "__main__":
    main()
