"""How much turning on every single-run check slows a small CPU fit, in a World and in-process.

    python benchmarks/checks_overhead.py                 # 9 rounds of 80 steps
    python benchmarks/checks_overhead.py --rounds 15 --steps 100

The target (``target`` below: a 2-layer MLP, batch 64, SGD; ``devices`` from ``WORLD_SIZE``)
is run two ways, interleaved with the order alternating each round:

  (a) no checks;
  (b) every single-run check: ReplicasInSync, FiniteLoss, FiniteGrads, DisjointShards,
      ErrorsSurface, NoHang(60).

1. World: ``world.run("benchmarks/checks_overhead.py:target", Schedule(), checks=...)`` in one
   ``chaoslight.World(size=2)``; the median ``outcome.wall_s`` of (a) and (b), and b/a
   (target <= 1.25).
2. In-process: ``with inject(Schedule(), checks=...)`` around a 1-process fit of the same
   target; the median wall time of (a) and (b), and b/a (plain ``trainer.fit`` with no
   ``inject`` is timed too, for reference).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

HERE = Path(__file__).resolve()
TARGET = f"{HERE}:target"
SIZE = 2
STEPS_ENV = "CHAOSLIGHT_BENCH_STEPS"  # the workers read the step count from here
DEFAULT_STEPS = 80


def target() -> int:
    """A small but real fit: 2-layer MLP, ``$CHAOSLIGHT_BENCH_STEPS`` steps, DDP if WORLD_SIZE>1."""
    import lightning.pytorch as pl

    steps = int(os.environ.get(STEPS_ENV, DEFAULT_STEPS))
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    generator = torch.Generator().manual_seed(0)
    rows = 64 * steps * devices
    data = TensorDataset(
        torch.randn(rows, 64, generator=generator),
        torch.randint(0, 10, (rows,), generator=generator),
    )

    class MLP(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
            )

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    torch.manual_seed(0)
    trainer = pl.Trainer(
        max_steps=steps,
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    trainer.fit(MLP(), DataLoader(data, batch_size=64))
    if trainer.global_step != steps:
        raise AssertionError(f"trained {trainer.global_step} steps, not {steps}")
    return int(trainer.global_step)


def quiet() -> None:
    """No per-fit banners in this process (Lightning adds loggers on the first fit: call again)."""
    import lightning.pytorch  # noqa: F401 - its loggers must exist to be quietened

    for name in list(logging.root.manager.loggerDict):
        if name.startswith("lightning"):
            logging.getLogger(name).setLevel(logging.ERROR)


def all_checks() -> list[Any]:
    from chaoslight.checks import (
        DisjointShards,
        ErrorsSurface,
        FiniteGrads,
        FiniteLoss,
        NoHang,
        ReplicasInSync,
    )

    return [
        ReplicasInSync(),
        FiniteLoss(),
        FiniteGrads(),
        DisjointShards(),
        ErrorsSurface(),
        NoHang(60),
    ]


def interleave(rounds: int, ways: dict[str, Callable[[], float]]) -> dict[str, list[float]]:
    """Run every way once per round, rotating the order; the times of each way."""
    names = list(ways)
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(ways[name]())
    return times


def report(title: str, times: dict[str, list[float]], target_ratio: float | None) -> None:
    names = list(times)
    base = statistics.median(times[names[0]])
    print(title)
    for name in names:
        median = statistics.median(times[name])
        spread = " ".join(f"{t:.3f}" for t in times[name])
        print(f"  {name:<34} median {median:.3f} s  x{median / base:.3f}  [{spread}]")
    checked, unchecked = names[-1], names[-2]
    ratio = statistics.median(times[checked]) / statistics.median(times[unchecked])
    paired = statistics.median(b / a for b, a in zip(times[checked], times[unchecked], strict=True))
    goal = f" (target <= {target_ratio:.2f})" if target_ratio else ""
    print(f"  b/a = {ratio:.3f}{goal}   [median of per-round ratios {paired:.3f}]")


def world_times(rounds: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    from chaoslight import Schedule
    from chaoslight._world import World

    checks = all_checks()
    caller: dict[str, list[float]] = {"a no checks": [], "b all checks": []}

    def way(name: str, chosen: list[Any]) -> Callable[[], float]:
        def run() -> float:
            start = time.perf_counter()
            outcome = world.run(TARGET, Schedule(), timeout=60, checks=chosen)
            caller[name].append(time.perf_counter() - start)
            if outcome.status != "passed":
                raise SystemExit(outcome.report())
            return float(outcome.wall_s)

        return run

    with World(size=SIZE) as world:
        world.start()
        ways = {"a no checks": way("a no checks", []), "b all checks": way("b all checks", checks)}
        for run in ways.values():  # warm-up: first-call costs in the workers
            run()
        for values in caller.values():
            values.clear()
        return interleave(rounds, ways), caller


def in_process_times(rounds: int) -> dict[str, list[float]]:
    import chaoslight
    from chaoslight import Schedule

    def timed(context: Callable[[], Any] | None) -> Callable[[], float]:
        def run() -> float:
            quiet()
            start = time.perf_counter()
            if context is None:
                target()
            else:
                with context() as injected:
                    target()
                if injected.violations:
                    raise AssertionError(f"violations: {injected.violations}")
            return time.perf_counter() - start

        return run

    ways = {
        "plain trainer.fit (reference)": timed(None),
        "a inject(Schedule())": timed(lambda: chaoslight.inject(Schedule())),
        "b inject(Schedule(), checks=all)": timed(
            lambda: chaoslight.inject(Schedule(), checks=all_checks())
        ),
    }
    for run in ways.values():
        run()  # warm-up
    return interleave(rounds, ways)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    args = parser.parse_args()
    os.environ[STEPS_ENV] = str(args.steps)  # before the World starts: workers inherit it
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    quiet()

    world, caller = world_times(args.rounds)
    local = in_process_times(args.rounds)
    import lightning

    print(
        f"{args.steps} steps, batch 64, MLP 64-256-10, SGD; {args.rounds} rounds interleaved; "
        f"{os.cpu_count()} cores, 1 torch thread per process; Python {sys.version.split()[0]}, "
        f"torch {torch.__version__}, Lightning {lightning.__version__}"
    )
    print(
        "checks (b): ReplicasInSync FiniteLoss FiniteGrads DisjointShards ErrorsSurface NoHang(60)"
    )
    report(f"World(size={SIZE}), outcome.wall_s:", world, 1.25)
    report(f"World(size={SIZE}), world.run timed in the caller (for reference):", caller, None)
    report("in-process, 1 rank, wall time of the with-block:", local, 1.25)


if __name__ == "__main__":
    main()
