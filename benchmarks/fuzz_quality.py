"""How fast a fuzz campaign gets from start to the minimal schedule of each planted bug,
against plain random sampling of the same strategy with the same budget.

    python benchmarks/fuzz_quality.py                       # seeds 1,2,3,4,5
    python benchmarks/fuzz_quality.py --seeds 1,2,3,4,5 --bugs two-ranks

Planted bugs (``examples/planted``), each with its known minimal schedule:

  swallowed-oom/in-process  swallowed_oom.py:train in this process (``in_process_runner``),
                            mode fail-cleanly, OOMs at the four user sites, ErrorsSurface;
                            minimal ``oom@lightning.forward rank=0 step=0``.
  swallowed-oom/world2      the same target on a World(size=2), as ``chaoslight fuzz`` runs it
                            (``world.run(..., timeout=5, checks=[ErrorsSurface()])`` judged by
                            ``verdict``); minimal the same.
  two-ranks/world2          two_rank_skips.py:train on the World, mode survive, OOMs at
                            lightning.forward; minimal: an OOM at step 0 on rank 0 and on rank 1.

For each bug and seed:

* chaoslight: ``Campaign(runner, strategy, max_examples, seed, replays=3).execute()``
  (generate, Hypothesis shrink, deletion pass, replays). Recorded: examples and seconds
  until the first failing example, examples and seconds until the minimal schedule is
  reported (``result.examples``, ``result.wall_s``: replays included), and whether it is
  the known minimal schedule.
* random: the same strategy under ``@given`` with ``phases=[Phase.generate]`` (no shrinking,
  no database), same seed, for as many examples as chaoslight used on that seed (or until a
  sampled failing schedule happens to be the minimal one). Recorded: examples and seconds
  to the first failure, the number of faults of that first failing schedule, and whether
  (and when) any sampled failing schedule was already minimal.

One World(size=2) serves every world-size-2 run. Targets at world size 2: median <= 30 s and
worst <= 60 s to the minimal schedule.
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

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed

ROOT = Path(__file__).resolve().parents[1]
PLANTED = ROOT / "examples" / "planted"
SWALLOWED = f"{PLANTED}/swallowed_oom.py:train"
TWO_RANKS = f"{PLANTED}/two_rank_skips.py:train"
USER_SITES = [
    "lightning.training_step",
    "lightning.forward",
    "lightning.backward",
    "lightning.optimizer_step",
]
ONE_OOM = "oom@lightning.forward rank=0 step=0"
TWO_OOMS = "oom@lightning.forward rank=0 step=0\noom@lightning.forward rank=1 step=0"
TIMEOUT = 5.0
REPLAYS = 3


@dataclass
class Bug:
    name: str
    minimal: str
    budget: int  # max_examples of the campaign
    strategy: Any
    runner: Callable[[Any], tuple[Any, Any]]


@dataclass
class Trial:
    """One search of one bug with one seed."""

    seed: int
    first_fail: int | None = None  # 1-based example number of the first failure
    first_fail_s: float | None = None
    first_size: int | None = None  # faults in the first failing schedule
    total: int = 0
    wall_s: float = 0.0  # chaoslight: to the report; random: to the minimal (if reached)
    minimal: bool = False
    note: str = ""


class Counting:
    """Wraps a runner: counts examples and notes the first failure."""

    def __init__(self, runner: Callable[[Any], tuple[Any, Any]]) -> None:
        self.runner = runner
        self.count = 0
        self.started = time.monotonic()
        self.first: tuple[int, float, Any] | None = None

    def __call__(self, schedule: Any) -> tuple[Any, Any]:
        verdict, outcome = self.runner(schedule)
        self.count += 1
        if verdict.failed and self.first is None:
            self.first = (self.count, time.monotonic() - self.started, schedule)
        return verdict, outcome


def quiet() -> None:
    """No Lightning banners from in-process fits (Lightning adds loggers on the first fit)."""
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("lightning"):
            logging.getLogger(name).setLevel(logging.ERROR)


def run_chaoslight(bug: Bug, seed: int) -> Trial:
    from chaoslight._search import Campaign

    counting = Counting(bug.runner)
    result = Campaign(counting, bug.strategy, bug.budget, seed, replays=REPLAYS).execute()
    trial = Trial(seed, total=result.examples, wall_s=result.wall_s)
    if counting.first is not None:
        trial.first_fail, trial.first_fail_s, first = counting.first
        trial.first_size = len(list(first))
    text = result.schedule.to_text() if result.schedule is not None else None
    trial.minimal = result.status == "failed" and text == bug.minimal
    if not trial.minimal:
        trial.note = f"status {result.status}, reported {text!r}"
    return trial


class _Minimal(Exception):
    pass


def run_random(bug: Bug, seed: int, budget: int) -> Trial:
    """Sample ``budget`` schedules of the strategy (no shrinking); stop early at a minimal one."""
    counting = Counting(bug.runner)
    trial = Trial(seed)

    @settings(
        max_examples=budget,
        phases=[Phase.generate],
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    @given(schedule=bug.strategy)
    def sample(schedule: Any) -> None:
        verdict, _ = counting(schedule)
        if verdict.failed and schedule.to_text() == bug.minimal:
            raise _Minimal

    started = time.monotonic()
    try:
        hypothesis_seed(seed)(sample)()
    except _Minimal:
        trial.minimal = True
        trial.wall_s = time.monotonic() - started
    except Exception as error:
        trial.note = f"{type(error).__name__}: {str(error).splitlines()[0][:80]}"
    trial.total = counting.count
    if counting.first is not None:
        trial.first_fail, trial.first_fail_s, first = counting.first
        trial.first_size = len(list(first))
    if not trial.minimal:
        trial.wall_s = time.monotonic() - started
    return trial


def in_process_bug() -> Bug:
    from chaoslight.strategies import schedules

    from chaoslight._search._inprocess import in_process_runner
    from chaoslight.checks import ErrorsSurface

    sys.path.insert(0, str(PLANTED))
    try:
        import swallowed_oom
    finally:
        sys.path.pop(0)
    runner = in_process_runner(swallowed_oom.train, "fail-cleanly", [ErrorsSurface()])

    def run(schedule: Any) -> tuple[Any, Any]:
        quiet()
        return runner(schedule)

    strategy = schedules(
        world_size=1, steps=4, faults=["oom"], mode="fail-cleanly", sites=USER_SITES
    )
    return Bug("swallowed-oom/in-process", ONE_OOM, 80, strategy, run)


def world_bugs(world: Any) -> list[Bug]:
    from chaoslight.strategies import schedules

    from chaoslight._search._property import verdict
    from chaoslight.checks import ErrorsSurface

    def runner(target: str, mode: str, checks: list[Any]) -> Callable[[Any], tuple[Any, Any]]:
        def run(schedule: Any) -> tuple[Any, Any]:
            outcome = world.run(target, schedule, timeout=TIMEOUT, checks=checks)
            return verdict(outcome, list(outcome.violations), mode), outcome

        return run

    swallowed = schedules(
        world_size=2, steps=4, faults=["oom"], mode="fail-cleanly", sites=USER_SITES
    )
    two = schedules(world_size=2, steps=4, faults=["oom"], sites=["lightning.forward"])
    return [
        Bug(
            "swallowed-oom/world2",
            ONE_OOM,
            60,
            swallowed,
            runner(SWALLOWED, "fail-cleanly", [ErrorsSurface()]),
        ),
        Bug("two-ranks/world2", TWO_OOMS, 200, two, runner(TWO_RANKS, "survive", [])),
    ]


def _fmt(values: list[float | None], digits: int = 1) -> str:
    """median/worst of the values; a missing value (never reached) makes the worst '-'."""
    present = [v for v in values if v is not None]
    if not present:
        return "-"
    median = f"{statistics.median(present):.{digits}f}"
    worst = f"{max(present):.{digits}f}" if len(present) == len(values) else "-"
    return f"{median}/{worst}"


def table(rows: list[tuple[Bug, str, list[Trial]]]) -> None:
    header = (
        f"{'bug':<25} {'search':<10} {'s to minimal':>13} {'s to 1st fail':>14} "
        f"{'ex to 1st fail':>15} {'ex total':>9} {'1st fail size':>14} {'minimal':>8}"
    )
    print(header)
    print(" " * 36 + "(each column: median/worst over seeds; '-': not reached in some seed)")
    print("-" * len(header))
    for bug, search, trials in rows:
        to_minimal = [t.wall_s if t.minimal else None for t in trials]
        sizes = [t.first_size for t in trials if t.first_size is not None]
        size = "/".join(str(s) for s in sizes) if sizes else "-"
        print(
            f"{bug.name:<25} {search:<10} {_fmt(to_minimal):>13} "
            f"{_fmt([t.first_fail_s for t in trials]):>14} "
            f"{_fmt([t.first_fail for t in trials], 0):>15} "
            f"{_fmt([t.total for t in trials], 0):>9} {size:>14} "
            f"{f'{sum(t.minimal for t in trials)}/{len(trials)}':>8}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3,4,5")
    parser.add_argument(
        "--bugs",
        default="in-process,swallowed-oom/world2,two-ranks",
        help="comma-separated substrings of the bug names to run",
    )
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    wanted = args.bugs.split(",")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    warnings.filterwarnings("ignore")
    import lightning.pytorch  # noqa: F401 - its loggers must exist to be quietened
    import torch

    from chaoslight._world import World

    torch.set_num_threads(1)
    quiet()
    started = time.monotonic()
    rows: list[tuple[Bug, str, list[Trial]]] = []

    def measure(bug: Bug) -> None:
        if not any(w in bug.name for w in wanted):
            return
        ours = [run_chaoslight(bug, seed) for seed in seeds]
        rand = [run_random(bug, seed, trial.total) for seed, trial in zip(seeds, ours, strict=True)]
        rows.append((bug, "chaoslight", ours))
        rows.append((bug, "random", rand))
        for search, trials in (("chaoslight", ours), ("random", rand)):
            for t in trials:
                print(
                    f"  {bug.name} {search} seed {t.seed}: first failure at example "
                    f"{t.first_fail} ({t.first_fail_s and round(t.first_fail_s, 1)} s, "
                    f"{t.first_size} faults), {t.total} examples, {t.wall_s:.1f} s, "
                    f"minimal {'yes' if t.minimal else 'no'} {t.note}",
                    flush=True,
                )

    measure(in_process_bug())
    with World(size=2) as world:
        world_started = time.monotonic()
        world.start()
        world_start_s = time.monotonic() - world_started
        for bug in world_bugs(world):
            measure(bug)

    print()
    print(
        f"seeds {seeds}; Campaign replays={REPLAYS}, World timeout {TIMEOUT:g} s; budgets: "
        "in-process 80, swallowed-oom/world2 60, two-ranks/world2 200 (random: the "
        f"examples chaoslight used on the same seed); {os.cpu_count()} cores; "
        f"World(size=2) start-up {world_start_s:.1f} s, once, not counted below; "
        f"total {time.monotonic() - started:.0f} s"
    )
    table(rows)
    for bug, search, trials in rows:
        if search == "chaoslight" and bug.name.endswith("world2"):
            times = [t.wall_s for t in trials]
            ok = (
                all(t.minimal for t in trials)
                and statistics.median(times) <= 30
                and max(times) <= 60
            )
            print(
                f"{bug.name}: median {statistics.median(times):.1f} s, worst {max(times):.1f} s "
                f"to minimal (targets <= 30 s, <= 60 s): {'met' if ok else 'NOT met'}"
            )


if __name__ == "__main__":
    main()
