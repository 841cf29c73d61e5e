"""How much every single-run check slows a CPU fit, tiny and large, in a World and in-process.

    python benchmarks/checks_overhead.py                     # both sizes (about 2 minutes)
    python benchmarks/checks_overhead.py --size tiny --rounds 15
    python benchmarks/checks_overhead.py --size large --steps 12
    python benchmarks/checks_overhead.py --per-check         # and each check alone, in-process

Two targets (``target_tiny``, ``target_large``: an MLP fit with SGD, ``devices`` from
``WORLD_SIZE``):

  tiny   64-256-10 MLP (19 K parameters), batch 64, 80 steps by default, 9 rounds;
  large  1024-2048-2048-2048-10 MLP (10.5 M parameters), batch 128, 8 steps, 7 rounds.

Each is run two ways (three in a World), interleaved with the order rotating each round:

  (a) no checks;
  (b) every single-run check: ReplicasInSync, FiniteLoss, FiniteGrads, DisjointShards,
      ErrorsSurface, NoHang(60);
  (c) in a World: the checks ``chaoslight fuzz`` uses by default (``DEFAULT_CHECKS``: the
      silent-damage checks too, which judge against the fault-free reference), and
      (c0) the defaults before them (``OLD_DEFAULTS``), side by side: c/c0 is what the
      new default checks cost together.

1. World: ``world.run("benchmarks/checks_overhead.py:target_SIZE", Schedule(), checks=...)``
   in one ``chaoslight.World(size=2)``; the median ``outcome.wall_s`` of (a) and (b), and b/a.
2. In-process: ``with inject(Schedule(), checks=...)`` around a 1-process fit of the same
   target; the median wall time of (a) and (b), and b/a (plain ``trainer.fit`` with no
   ``inject`` is timed too, for reference). One rank: ReplicasInSync has nothing to compare.

Targets: b/a <= 1.10 at the large size, <= 1.25 at the tiny one; c/c0 <= 1.10 at the
large size. The summary at the end
prints b/a for every size and place.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

HERE = Path(__file__).resolve()
SIZE = 2


@dataclass(frozen=True)
class Model:
    """One benchmark target: layer widths, batch, default steps and rounds, the b/a target."""

    widths: tuple[int, ...]
    batch: int
    steps: int
    rounds: int
    goal: float

    @property
    def parameters(self) -> int:
        return sum((a + 1) * b for a, b in zip(self.widths, self.widths[1:], strict=False))

    def describe(self) -> str:
        shape = "-".join(str(w) for w in self.widths)
        return f"MLP {shape} ({self.parameters / 1e6:.2f} M parameters), batch {self.batch}"


MODELS = {
    "tiny": Model((64, 256, 10), batch=64, steps=80, rounds=9, goal=1.25),
    "large": Model((1024, 2048, 2048, 2048, 10), batch=128, steps=8, rounds=7, goal=1.10),
}


def steps_variable(size: str) -> str:
    """The environment variable the workers read the step count of ``size`` from."""
    return f"CHAOSLIGHT_BENCH_STEPS_{size.upper()}"


def fit(size: str) -> int:
    """A fit of ``MODELS[size]``: ``$CHAOSLIGHT_BENCH_STEPS_<SIZE>`` steps, DDP if WORLD_SIZE>1."""
    import lightning.pytorch as pl

    model = MODELS[size]
    steps = int(os.environ.get(steps_variable(size), model.steps))
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    generator = torch.Generator().manual_seed(0)
    rows = model.batch * steps * devices
    data = TensorDataset(
        torch.randn(rows, model.widths[0], generator=generator),
        torch.randint(0, model.widths[-1], (rows,), generator=generator),
    )

    class MLP(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            layers: list[torch.nn.Module] = []
            for a, b in zip(model.widths, model.widths[1:], strict=False):
                layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
            self.net = torch.nn.Sequential(*layers[:-1])

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    torch.manual_seed(0)
    quiet()  # no banners from the workers either
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
    trainer.fit(MLP(), DataLoader(data, batch_size=model.batch))
    if trainer.global_step != steps:
        raise AssertionError(f"trained {trainer.global_step} steps, not {steps}")
    return int(trainer.global_step)


def target_tiny() -> int:
    """The tiny target (a World loads it by name)."""
    return fit("tiny")


def target_large() -> int:
    """The large target (a World loads it by name)."""
    return fit("large")


target = target_tiny  # the name earlier versions of this script ran


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


# The default checks before the silent-damage ones joined them (issue 20).
OLD_DEFAULTS = ("replicas-in-sync", "disjoint-shards", "finite-loss", "errors-surface", "no-hang")


def default_checks() -> list[Any]:
    """The checks ``chaoslight fuzz`` uses when given none, as objects."""
    from chaoslight._search import DEFAULT_CHECKS
    from chaoslight.checks import check_by_name

    return [check_by_name(name) for name in DEFAULT_CHECKS]


def old_default_checks() -> list[Any]:
    from chaoslight.checks import check_by_name

    return [check_by_name(name) for name in OLD_DEFAULTS]


def interleave(rounds: int, ways: dict[str, Callable[[], float]]) -> dict[str, list[float]]:
    """Run every way once per round, rotating the order; the times of each way."""
    names = list(ways)
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(ways[name]())
    return times


def ratio(times: dict[str, list[float]], checked: str | None = None) -> tuple[float, float]:
    """b/a of the medians (``checked``, default the last way, over the one before it, or
    over ``a no checks`` when named), and the median of the per-round ratios."""
    if checked is None:
        checked, unchecked = list(times)[-1], list(times)[-2]
    else:
        unchecked = "a no checks"
    whole = statistics.median(times[checked]) / statistics.median(times[unchecked])
    paired = statistics.median(b / a for b, a in zip(times[checked], times[unchecked], strict=True))
    return whole, paired


def report(title: str, times: dict[str, list[float]], goal: float | None) -> None:
    names = list(times)
    base = statistics.median(times[names[0]])
    print(title)
    for name in names:
        median = statistics.median(times[name])
        spread = " ".join(f"{t:.3f}" for t in times[name])
        print(f"  {name:<34} median {median:.3f} s  x{median / base:.3f}  [{spread}]")
    whole, paired = ratio(times, "b all checks" if "b all checks" in times else None)
    target_text = f" (target <= {goal:.2f})" if goal else ""
    print(f"  b/a = {whole:.3f}{target_text}   [median of per-round ratios {paired:.3f}]")


def world_times(
    world: Any, size: str, rounds: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    from chaoslight import Schedule

    checks = all_checks()
    name = f"{HERE}:target_{size}"
    caller: dict[str, list[float]] = {"a no checks": [], "b all checks": []}

    def way(label: str, chosen: list[Any]) -> Callable[[], float]:
        def run() -> float:
            start = time.perf_counter()
            outcome = world.run(name, Schedule(), timeout=120, checks=chosen)
            caller[label].append(time.perf_counter() - start)
            if outcome.status != "passed":
                raise SystemExit(outcome.report())
            return float(outcome.wall_s)

        return run

    chosen = {
        "a no checks": [],
        "c0 the old defaults": old_default_checks(),
        "c the defaults": default_checks(),
        "b all checks": checks,
    }
    caller.update({label: [] for label in chosen})
    ways = {label: way(label, checks) for label, checks in chosen.items()}
    for run in ways.values():  # warm-up: first-call costs in the workers (references too)
        run()
    for values in caller.values():
        values.clear()
    return interleave(rounds, ways), caller


def defaults_ratio(times: dict[str, list[float]]) -> str:
    """c/c0 and c/a: what the new default checks cost, and all the defaults."""
    c, c0, a = (
        statistics.median(times[k])
        for k in ("c the defaults", "c0 the old defaults", "a no checks")
    )
    return f"c/c0 {c / c0:.3f} (target <= 1.10), c/a {c / a:.3f}"


def in_process_times(size: str, rounds: int) -> dict[str, list[float]]:
    import chaoslight
    from chaoslight import Schedule

    def timed(context: Callable[[], Any] | None) -> Callable[[], float]:
        def run() -> float:
            quiet()
            start = time.perf_counter()
            if context is None:
                fit(size)
            else:
                with context() as injected:
                    fit(size)
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


def per_check_times(size: str, rounds: int) -> dict[str, list[float]]:
    """In-process: no checks, then each check of (b) alone, interleaved."""
    import chaoslight
    from chaoslight import Schedule

    def timed(checks: list[Any]) -> Callable[[], float]:
        def run() -> float:
            quiet()
            start = time.perf_counter()
            with chaoslight.inject(Schedule(), checks=checks):
                fit(size)
            return time.perf_counter() - start

        return run

    ways = {"no checks": timed([])}
    ways.update({type(check).__name__: timed([check]) for check in all_checks()})
    for run in ways.values():
        run()  # warm-up
    return interleave(rounds, ways)


def report_per_check(size: str, times: dict[str, list[float]]) -> None:
    base = times["no checks"]
    print(f"in-process, 1 rank, one check at a time ({size}; ratio to no checks):")
    for name, values in list(times.items())[1:]:
        whole = statistics.median(values) / statistics.median(base)
        paired = statistics.median(b / a for b, a in zip(values, base, strict=True))
        print(f"  {name:<16} x{whole:.3f}   [median of per-round ratios {paired:.3f}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size", choices=("tiny", "large", "both"), default="both")
    parser.add_argument("--rounds", type=int, help="rounds per size (default: 9 tiny, 7 large)")
    parser.add_argument("--steps", type=int, help="steps per fit (default: 80 tiny, 8 large)")
    parser.add_argument(
        "--per-check", action="store_true", help="also time each check alone, in-process"
    )
    args = parser.parse_args()
    sizes = ["tiny", "large"] if args.size == "both" else [args.size]
    for size in sizes:  # before the World starts: workers inherit the environment
        os.environ[steps_variable(size)] = str(args.steps or MODELS[size].steps)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    quiet()
    from chaoslight._world import World

    rounds = {size: args.rounds or MODELS[size].rounds for size in sizes}
    world: dict[str, tuple[dict[str, list[float]], dict[str, list[float]]]] = {}
    with World(size=SIZE) as pool:
        pool.start()
        for size in sizes:
            world[size] = world_times(pool, size, rounds[size])
    local = {size: in_process_times(size, rounds[size]) for size in sizes}
    alone = {size: per_check_times(size, rounds[size]) for size in sizes if args.per_check}
    import lightning

    print(
        f"{os.cpu_count()} cores, 1 torch thread per process; Python {sys.version.split()[0]}, "
        f"torch {torch.__version__}, Lightning {lightning.__version__}; SGD; rounds interleaved"
    )
    print(
        "checks (b): ReplicasInSync FiniteLoss FiniteGrads DisjointShards ErrorsSurface NoHang(60)"
    )
    summary = []
    for size in sizes:
        model = MODELS[size]
        steps = os.environ[steps_variable(size)]
        print(f"\n== {size}: {model.describe()}, {steps} steps, {rounds[size]} rounds ==")
        report(f"World(size={SIZE}), outcome.wall_s:", world[size][0], model.goal)
        report(f"World(size={SIZE}), world.run timed in the caller:", world[size][1], None)
        report("in-process, 1 rank, wall time of the with-block:", local[size], model.goal)
        if size in alone:
            report_per_check(size, alone[size])
        for place, times in (("World(size=2)", world[size][0]), ("in-process", local[size])):
            whole, paired = ratio(times, "b all checks" if "b all checks" in times else None)
            summary.append(
                f"  {size:<6} {place:<14} b/a {whole:.3f} "
                f"(per-round median {paired:.3f}; target <= {model.goal:.2f})"
            )
        summary.append(f"  {size:<6} World(size=2)  {defaults_ratio(world[size][0])}")
    print("\nall-default-checks overhead (b/a):")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
