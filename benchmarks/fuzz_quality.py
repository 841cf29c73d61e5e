"""Examples and seconds to the minimal failing schedule of each planted bug: the default
search (reach-first: faults where the baseline run went, probes at the rare points)
against the uniform search it replaced (12 common sites, steps 0..3, no probes), side by
side on the same World, seeds and budget.

    python benchmarks/fuzz_quality.py                        # seeds 0,1,2; budget 60
    python benchmarks/fuzz_quality.py --seeds 0,1,2,3,4 --budget 100 --bugs epoch

Planted bugs (``examples/planted``) and the minimal schedule each should shrink to:

  swallowed_oom         oom@lightning.forward rank=0 step=0
  two_rank_skips        oom@lightning.forward step=0 (every rank), or one OOM per rank
  epoch_race            delay@lightning.on_train_epoch_end rank=0 step=7 (a race between hooks)
  epoch_end_save        raise@torch.save rank=0 (OSError, only at an epoch's last step)
  one_rank_collective   the empty schedule (a collective one rank issues alone)

For each bug, search and seed: found or not, examples run until the result (baseline,
probes, search, shrinking and replays included), seconds, and whether the result has the
expected shape. Each uses ``chaoslight.fuzz`` (``world=`` the shared World) or, for the
uniform search, the same Campaign with the old static strategy.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PLANTED = ROOT / "examples" / "planted"

import chaoslight  # noqa: E402
from chaoslight import Settings  # noqa: E402
from chaoslight._search import Campaign  # noqa: E402
from chaoslight._search._job import make_job  # noqa: E402
from chaoslight._search._schedule_strategies import schedules  # noqa: E402
from chaoslight._world import World  # noqa: E402

TIMEOUT = 10.0


@dataclass(frozen=True)
class Bug:
    name: str
    expected: Callable[[Any], bool]  # the reported schedule has the minimal shape


def _kinds(schedule: Any) -> list[tuple[str, str, int | None]]:
    return sorted((f.kind, f.site, f.rank) for f in schedule)


BUGS = (
    Bug("swallowed_oom", lambda s: _kinds(s) == [("oom", "lightning.forward", 0)]),
    Bug(
        "two_rank_skips",
        lambda s: (
            _kinds(s)
            in (
                [("oom", "lightning.forward", 0), ("oom", "lightning.forward", 1)],
                [("oom", "lightning.forward", None)],  # one OOM on every rank at once
            )
        ),
    ),
    Bug("epoch_race", lambda s: _kinds(s) == [("delay", "lightning.on_train_epoch_end", 0)]),
    Bug("epoch_end_save", lambda s: _kinds(s) == [("raise", "torch.save", 0)]),
    Bug("one_rank_collective", lambda s: len(s) == 0),
)


def reach_first(world: World, target: str, budget: int, seed: int) -> Any:
    result, _ = chaoslight.fuzz(
        target, max_examples=budget, seed=seed, timeout=TIMEOUT, replays=1, world=world
    )
    return result


def uniform(world: World, target: str, budget: int, seed: int) -> Any:
    """The search before reach: 12 common sites, steps 0..3, no probes."""
    job = make_job(target, Settings(timeout=TIMEOUT))
    strategy = schedules(world_size=2, steps=4)
    with job.runner(world) as run:
        settings = Settings(max_examples=budget, seed=seed, replays=1)
        return Campaign(run, strategy, settings).execute()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--budget", type=int, default=60, help="max examples (%(default)s)")
    parser.add_argument("--bugs", default="", help="comma-separated substrings of bug names")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    chosen = [b for b in BUGS if not args.bugs or any(p in b.name for p in args.bugs.split(","))]
    print(
        f"{'bug':<20} {'search':<12} {'seed':>4} {'found':<6} {'shape':<6} {'examples':>8} {'s':>7}"
    )
    totals: dict[str, list[float]] = {"reach-first": [], "uniform": []}
    found: dict[str, int] = {"reach-first": 0, "uniform": 0}
    with World(size=2) as world:
        for bug in chosen:
            target = f"{PLANTED}/{bug.name}.py:train"
            for seed in seeds:
                for name, search in (("reach-first", reach_first), ("uniform", uniform)):
                    started = time.monotonic()
                    result = search(world, target, args.budget, seed)
                    wall = time.monotonic() - started
                    hit = result.schedule is not None
                    shape = hit and bug.expected(result.schedule)
                    found[name] += bool(shape)
                    totals[name].append(wall)
                    print(f"{bug.name:<20} {name:<12} {seed:>4} {hit!s:<6} {shape!s:<6} "
                          f"{result.examples:>8} {wall:7.1f}", flush=True)  # fmt: skip
    runs = len(chosen) * len(seeds)
    print()
    for name in totals:
        median = statistics.median(totals[name]) if totals[name] else 0.0
        print(f"{name:<12} minimal schedule found in {found[name]}/{runs} campaigns; "
              f"median {median:.1f} s per campaign")  # fmt: skip
    print(f"budget {args.budget} examples, timeout {TIMEOUT:g} s, World(size=2), seeds {seeds}")


if __name__ == "__main__":
    sys.exit(main())
