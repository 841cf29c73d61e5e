"""One campaign's job: the target, the World's size, the checks, and the runner that runs
a schedule on a warm World (or a fresh one) and judges it with the oracle. The first
fault-free run also records the run's reach (``_checks/_reach.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from chaoslight._checks._reach import ReachRecorder
from chaoslight._runtime import as_checks
from chaoslight._schedule import Schedule
from chaoslight._search._reach import Reach
from chaoslight._search._settings import Settings
from chaoslight._verdict._oracle import Verdict, judge
from chaoslight._world import Outcome, World
from chaoslight._world._target import parse_target


class Quiet:
    """The progress display of a campaign run from Python: shows nothing."""

    def __enter__(self) -> Quiet:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, progress: Any) -> None:
        return None


@dataclass
class Job:
    """What every run of one campaign shares: the target, the World's size, the checks."""

    target: str
    world_size: int
    timeout: float
    checks: tuple[Any, ...]
    reach: Reach | None = field(default=None)  # recorded by the first fault-free run

    def run(self, world: World, schedule: Schedule, trace: bool = False) -> tuple[Verdict, Outcome]:
        record = self.reach is None and not schedule.faults
        checks = (*self.checks, ReachRecorder()) if record else self.checks
        outcome = world.run(self.target, schedule, timeout=self.timeout, checks=checks, trace=trace)
        if record:
            self.reach = Reach.from_outcome(outcome)
        return judge(outcome), outcome

    @contextmanager
    def runner(self, world: World | None = None) -> Iterator[Any]:
        """A Campaign runner on one warm World (``world``, or one started here and closed
        after); ``fresh=True`` runs on new processes and directories (``World.renew``)."""
        started: Any = World(size=self.world_size) if world is None else nullcontext(world)
        with started as warm:

            def run(schedule: Schedule, fresh: bool = False) -> tuple[Verdict, Outcome]:
                return self.run(warm.renew() if fresh else warm, schedule)

            yield run


def make_job(target: str, settings: Settings) -> Job:
    """The job of ``settings`` (checked when they were built) on ``target``."""
    parse_target(target)
    return Job(target, settings.world_size, settings.timeout, tuple(as_checks(settings.checks)))
