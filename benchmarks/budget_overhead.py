"""What a MemoryBudget costs: the CPU allocator that counts, or the dispatch mode.

Runs two workloads six ways, interleaved, several rounds, in one process:

  workloads: a small Lightning fit (the MLP of ``overhead.py``) and a tight loop of small
  tensor ops (``cat``, ``@``, an in-place add, ``relu``, a view) on 64x64 tensors;
  ways: (a) plain; (b) inside ``inject(Schedule())``: no budget, nothing counts;
  (c) under ``MemoryBudget(1 TiB)`` with the default ``min_tracked_bytes`` (1 MiB), counted
  by chaoslight's CPU allocator (``_runtime/_cpu_budget.py``; on CUDA, the card's);
  (d) the same with ``min_tracked_bytes=1``: every allocation is counted;
  (e) an empty Python ``TorchDispatchMode`` (each op passed on, nothing counted): the floor
  of any budget that sees each op from Python, whatever it does with it;
  (f) way (c) counted by the dispatch mode, as where no allocator can be built
  (``CHAOSLIGHT_CPU_BUDGET=ops``): every op goes through Python.

and prints, per workload and clock, the median time of each way and its ratio to (a).
The old factory-only tracking (wrapped ``torch.empty``/``zeros``/...) was removed with the
dispatch mode, so there is no fifth way to compare with.

    python benchmarks/budget_overhead.py                  # 5 rounds, 200 fit steps
    python benchmarks/budget_overhead.py --rounds 9 --steps 500 --loop 5000
    python benchmarks/budget_overhead.py --device cuda    # a fit and the op loop on the GPU
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
import torch
from overhead import device_name, loader, time_fit
from torch.utils._python_dispatch import TorchDispatchMode

import chaoslight
from chaoslight import MemoryBudget, Schedule
from chaoslight._runtime import _cpu_budget

Way = Callable[[], Any]


class EmptyMode(TorchDispatchMode):
    """Passes every op on: what a Python dispatch mode costs before it does anything."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # as the budget's own mode: no dynamo guard around each op

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def empty_mode() -> Any:
    with EmptyMode():
        yield None


@contextlib.contextmanager
def counted_by_ops(schedule: Schedule) -> Any:
    """``inject(schedule)`` with its CPU budget counted by the dispatch mode."""
    counter = _cpu_budget.counter
    _cpu_budget.counter = lambda: None  # type: ignore[assignment]
    try:
        with chaoslight.inject(schedule):
            yield
    finally:
        _cpu_budget.counter = counter  # type: ignore[assignment]


def fit_workload(steps: int, data: Any, device: str) -> Callable[[Way], tuple[float, float]]:
    """Wall and CPU seconds of one ``trainer.fit`` of ``steps`` steps inside a way."""

    return lambda context: time_fit(steps, data, context, device)  # overhead.py's own fit


def loop_workload(iterations: int, device: str) -> Callable[[Way], tuple[float, float]]:
    """Wall and CPU seconds of ``iterations`` x 5 small ops inside a way."""
    a, w = torch.randn(64, 64, device=device), torch.randn(64, 64, device=device)

    def run(context: Way) -> tuple[float, float]:
        with context():
            start, start_cpu = time.perf_counter(), time.process_time()
            for _ in range(iterations):
                y = torch.cat([a, a]) @ w
                y.add_(1)
                y.relu().view(-1)
            if device == "cuda":
                torch.cuda.synchronize()
            return time.perf_counter() - start, time.process_time() - start_cpu

    return run


def measure(
    run: Callable[[Way], tuple[float, float]], ways: dict[str, Way], rounds: int
) -> dict[str, dict[str, list[float]]]:
    """Per clock ("wall", "cpu") and way, the seconds of each round."""
    names = list(ways)
    times: dict[str, dict[str, list[float]]] = {
        clock: {name: [] for name in names} for clock in ("wall", "cpu")
    }
    for context in ways.values():  # warm-up: imports, first-call costs, allocator
        run(context)
    for round_ in range(rounds):
        # Rotate the order every round so drift (other load) hits every way alike.
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            wall, cpu = run(ways[name])
            times["wall"][name].append(wall)
            times["cpu"][name].append(cpu)
    return times


def report(title: str, times: dict[str, dict[str, list[float]]]) -> None:
    print(title)
    for clock, by_way in times.items():
        names = list(by_way)
        plain = by_way[names[0]]
        print(f"  {clock} time (median; median of per-round ratios to (a) in brackets):")
        for name in names:
            median = statistics.median(by_way[name])
            paired = statistics.median(x / p for x, p in zip(by_way[name], plain, strict=True))
            ratio = median / statistics.median(plain)
            print(f"    {name:<34} {median:8.3f} s  x{ratio:.2f}  [x{paired:.2f}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--loop", type=int, default=3000, help="iterations of the op loop")
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu", help="where both workloads run"
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch intra-op threads (0: torch's default)"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("lightning"):
            logging.getLogger(name).setLevel(logging.ERROR)  # no per-fit banners

    big = Schedule(memory_budget=MemoryBudget(2**40))
    every = Schedule(memory_budget=MemoryBudget(2**40, min_tracked_bytes=1))
    ways: dict[str, Way] = {
        "a plain": contextlib.nullcontext,
        "b inject(Schedule()), no budget": lambda: chaoslight.inject(Schedule()),
        "c budget, min_tracked_bytes=1MiB": lambda: chaoslight.inject(big),
        "d budget, min_tracked_bytes=1": lambda: chaoslight.inject(every),
        "e empty dispatch mode (the floor)": empty_mode,
        "f budget, 1MiB, counted by ops": lambda: counted_by_ops(big),
    }
    how, why = _cpu_budget.how_counted()
    if how != _cpu_budget.ALLOCATOR:
        print(f"the CPU budget is counted by ops here, so (c) and (d) are too: {why}")
    print(
        f"{device_name(args.device)}, {args.rounds} rounds interleaved, "
        f"torch threads {torch.get_num_threads()}, "
        f"Python {sys.version.split()[0]}, torch {torch.__version__}, Lightning {pl.__version__}"
    )
    fit = fit_workload(args.steps, loader(args.steps, args.batch), args.device)
    report(
        f"trainer.fit of {args.steps} steps (3-layer MLP, width 256, batch {args.batch}, Adam):",
        measure(fit, ways, args.rounds),
    )
    report(
        f"op loop: {args.loop} x (cat, @, add_, relu, view) on 64x64 float32:",
        measure(loop_workload(args.loop, args.device), ways, args.rounds),
    )


if __name__ == "__main__":
    main()
