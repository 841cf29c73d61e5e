"""The jobs of a soak: faults at exponential intervals, placed where the run goes.

A soak is a cluster's life compressed: job after job of the same training, each as long
as the fault-free baseline run (``job_seconds``), while faults arrive as a Poisson process
with mean interval ``mtbf`` seconds (torchft's kill loop). A fault that arrives a fraction
``f`` into a job goes to the step the run is at then (the baseline's reached steps, in
order; the hooks before the first step come first), at a site of that step where its kind
can fire, on the rank and with the parameters its kind's strategy draws. Its kind is drawn
from the default search's kinds (their traits say which; a kind registered later is drawn
too). A job whose faults can end a run is restarted as a cluster requeues it: once for
each such fault, at most ``MAX_RESTARTS`` times; a fault that arrives after one that ends
its process (a crash, a preemption) is bound to the run the restart makes, so faults
strike again while the job resumes.

Everything is drawn from ``seed``: the same seed, baseline reach and job length give the
same jobs, in the same order, whatever the jobs' verdicts (the soak file records them, so
a replay never draws again).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import fields, replace
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed

from chaoslight._schedule import FAULT_KINDS, Fault, InvalidArgument, Schedule, Severity
from chaoslight._schedule._validate import MAX_RESTARTS
from chaoslight._search._drawing import DEFAULT_SITES, reach_sites
from chaoslight._search._kinds import resolve_kinds
from chaoslight._search._reach import USER_WEIGHT, Point, Reach, Space
from chaoslight._search._strategies import KIND_STRATEGIES

POOL_SIZE = 25  # faults drawn per kind from its strategy: the parameters a soak picks from
MAX_JOB_FAULTS = 8  # a job hit more often than this is shredded; more would only be noise


def arrival_times(seed: int, mtbf: float) -> Iterator[float]:
    """Seconds since the soak began at which faults arrive: gaps drawn exponentially with
    mean ``mtbf`` from ``seed`` (a Poisson process, as independent failures arrive)."""
    rng = random.Random(f"chaoslight-soak:{seed}:arrivals")
    now = 0.0
    while True:
        now += rng.expovariate(1.0 / mtbf)
        yield now


def fault_pool(strategy: Any, seed: int, size: int = POOL_SIZE) -> list[Fault]:
    """``size`` faults the strategy draws from ``seed`` (Hypothesis's generation, seeded:
    the same seed draws the same faults, with the same Hypothesis)."""
    found: list[Fault] = []

    # From Hypothesis's own defaults, not the loaded profile: a profile that derandomizes
    # or prints each example must not change (or flood) a soak.
    @settings(
        settings.get_profile("default"),
        max_examples=size,
        database=None,
        phases=[Phase.generate],
        deadline=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis_seed(seed)
    @given(strategy)
    def collect(fault: Fault) -> None:
        found.append(fault)

    collect()
    return found


class SoakPlan:
    """The soak's jobs for ``world_size`` ranks over ``reach`` (None: the search's default
    sites at steps ``0..steps-1``), each ``job_seconds`` long, faults every ``mtbf``
    seconds on average, of ``faults`` (None: the default search's kinds)."""

    def __init__(
        self,
        *,
        seed: int,
        mtbf: float,
        job_seconds: float,
        world_size: int,
        reach: Reach | None,
        faults: Any = None,
        steps: int = 4,
    ) -> None:
        self.seed, self.mtbf, self.job_seconds = seed, mtbf, max(job_seconds, 1e-3)
        self.world_size, self.steps = world_size, steps
        if reach is None or not reach.points:
            points = tuple((site, step) for step in range(steps) for site in DEFAULT_SITES)
            reach = Reach(points)
        self.reach = reach
        self.space = Space(world_size, reach_sites(reach), steps, reach)
        kinds = [FAULT_KINDS[kind] for kind in resolve_kinds(faults)]
        self.kinds = [cls for cls in kinds if self.space.can_take(cls.drawn_at)]
        if not self.kinds:
            raise InvalidArgument(f"no fault kind of {faults!r} can fire where the run goes")
        # The run's clock: its reached steps in order, the hooks outside any step first.
        self.steps_in_order = sorted({step for _, step in reach.points}, key=_step_order)
        self._pools: dict[str, list[Fault]] = {}
        for cls in self.kinds:  # drawn now, before the soak's clock starts
            self._pool(cls)

    def jobs(self) -> Iterator[Schedule]:
        """Every job's schedule, in order (endless: the soak stops when its time is up)."""
        arrivals = arrival_times(self.seed, self.mtbf)
        place = random.Random(f"chaoslight-soak:{self.seed}:place")
        pending = next(arrivals)
        index = 0
        while True:
            start, end = index * self.job_seconds, (index + 1) * self.job_seconds
            faults: list[Fault] = []
            while pending < end:
                if len(faults) >= MAX_JOB_FAULTS:
                    # The arrivals are memoryless: the next after this job's end is as if
                    # the process started again there.
                    pending = end + (next(arrivals) - pending)
                    break
                fault = self.fault_at((pending - start) / self.job_seconds, place)
                fault = _in_run(fault, 1 + sum(f.kills_process for f in faults))
                if all(str(fault) != str(other) for other in faults):
                    faults.append(fault)
                pending = next(arrivals)
            yield job_schedule(faults)
            index += 1

    def fault_at(self, fraction: float, rng: random.Random) -> Fault:
        """A fault of a drawn kind at the step the run is at ``fraction`` into it."""
        cls = rng.choice(self.kinds)
        base = rng.choice(self._pool(cls))
        position = min(int(fraction * len(self.steps_in_order)), len(self.steps_in_order) - 1)
        site, step = self._point(cls, position, rng)
        try:
            return replace(base, site=site, step=step)
        except InvalidArgument:  # a kind whose parameters bind it to its site: as drawn
            return base

    def _point(self, cls: type[Fault], position: int, rng: random.Random) -> Point:
        """A reached point of the step at ``position`` (or the nearest step that has one)
        where ``cls`` can fire; the user's own hooks weighted as the search weights them."""
        able = set(self.space.able(cls.drawn_at))
        by_distance = sorted(
            range(len(self.steps_in_order)), key=lambda other: (abs(other - position), other)
        )
        for other in by_distance:
            step = self.steps_in_order[other]
            sites = [s for s, at in self.reach.points if at == step and s in able]
            if sites:
                weighted = [s for s in sites for _ in range(self._weight(s))]
                return rng.choice(weighted), step
        raise AssertionError(f"{cls.kind} was kept though no reached site can take it")

    def _weight(self, site: str) -> int:
        return USER_WEIGHT if site in self.reach.user else 1

    def _pool(self, cls: type[Fault]) -> list[Fault]:
        if cls.kind not in self._pools:
            strategy = KIND_STRATEGIES[cls](
                world_size=self.world_size, steps=self.steps, sites=None, reach=self.reach
            )
            self._pools[cls.kind] = fault_pool(strategy, self.seed)
        return self._pools[cls.kind]


def job_schedule(faults: list[Fault]) -> Schedule:
    """A job's schedule: its faults, and a restart for each that can end a run (a cluster
    requeues a job that failed or was preempted), at most ``MAX_RESTARTS``."""
    ending = sum(1 for fault in faults if fault.fault_class() != Severity.BENIGN)
    return Schedule(faults, restarts=min(ending, MAX_RESTARTS))


def _in_run(fault: Fault, run: int) -> Fault:
    """A fault that arrives after a fault that ends its process, bound to the run the
    restart makes (the job is resuming then: a fault during recovery)."""
    if run == 1 or "run" not in {f.name for f in fields(fault)}:
        return fault
    return replace(fault, run=min(run, MAX_RESTARTS + 1))


def _step_order(step: int | None) -> int:
    return -1 if step is None else step
