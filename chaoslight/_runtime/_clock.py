"""The engine's clock: the rank and step it last decided at, how it sees that they moved,
and whether it hears of every move (``steady``: then its gates may close, ``_gates.py``).

Two C-level readings stand for the rank and the step (``_context.group_reading`` and
``step_reading``): an open site's call compares them with their values at the decision
and decides again when one changed. A steady engine is told of each move instead: a
loop's steps are its own count, and a Trainer's training loop counts its batches through
a patched ``increment_ready`` (``_sites/_lightning._progress_moved``), once it has counted
one since the Trainer entered its fit (a resumed checkpoint moves the step unannounced).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chaoslight._runtime._context import current_rank, group_reading, step_counter, step_reading

_STALE = object()  # a reading's value no reading returns


class Clock:
    """Readings of the rank and step, their values at the last decision, the period they
    made (``(rank, step)``) and the highest step decided at."""

    def __init__(self, environment_rank: int, loop_step: Callable[[], int | None]) -> None:
        self.environment_rank = environment_rank
        self._loop_step = loop_step
        self.steps: Any = None
        self.group: Any = None
        self.read_steps: Any = _STALE
        self.read_group: Any = _STALE
        self.period: tuple[int, int | None] = (environment_rank, None)
        self.last_step: int | None = None
        # A loop's steps are the engine's own count: it hears of every move from the start.
        self.steady = True
        self.counter: Any = None  # the running Trainer's training-loop batch progress

    def read(self, trainer: Any, step: Callable[[], int | None]) -> tuple[int, int | None]:
        """Take the readings of a decision; the rank and step it decides at."""
        self.group = group_reading()
        self.counter = step_counter(trainer)
        self.steps = step_reading(self.counter) or self._loop_step
        self.read_steps, self.read_group = self.steps(), self.group()
        now = current_rank(self.environment_rank), step()
        self.period = now
        self.reached(now[1])
        return now

    def moved(self) -> bool:
        """Whether the rank or the step may have moved since the last decision."""
        return self.steps() != self.read_steps or self.group() is not self.read_group

    def advance(self, step: int) -> None:
        """The step moved to ``step`` and nothing else did: no decision needed."""
        self.read_steps = self.steps()
        self.period = (self.period[0], step)
        self.reached(step)

    def reached(self, step: int | None) -> None:
        if step is not None and (self.last_step is None or step > self.last_step):
            self.last_step = step

    @property
    def rank_known(self) -> bool:
        """A process group says the rank (before one, a launcher's variable may not)."""
        return self.read_group is not None

    @property
    def same_group(self) -> bool:
        return self.group() is self.read_group

    def stale(self) -> None:
        """The step may move unseen (a trainer gone): decide again at the next call."""
        self.read_steps = _STALE
        self.steady = False
