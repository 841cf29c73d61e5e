"""What checks judge: every rank's events and how each rank ended; what they report.

Low in the import order (it needs only the event log), so the runtime, the World and
the checks all speak it without importing one another upwards.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from chaoslight._runtime._events import Event, EventKind

OBSERVATION = EventKind.OBSERVATION


@dataclass(frozen=True)
class Violation:
    """A broken invariant: the check's name, what happened and where, the usual cause.

    ``warning=True`` reports something a correct program may still do (a restart that
    Lightning itself says cannot resume exactly): shown, never a failure."""

    check: str
    message: str
    rank: int | None = None
    step: int | None = None
    cause: str = ""
    warning: bool = False
    # A guarantee that holds however the run ended (a job that tells its launcher it
    # succeeded must have finished): the oracle fails the run on it even where the
    # faults that fired let the run fail cleanly. Others count only on a run that passed.
    any_end: bool = False
    # What of the run it compares, as data for whoever reads violations (a known issue's
    # signature claims only the aspects its bug changes): e.g. restart-equivalence's
    # "position", "samples", "learning-rate", "end", "optimizer", "callbacks", "weights".
    aspect: str = ""
    # The run of a restarted job it is about (1 the first); None: the job's last run, or a
    # job of one run. Data, so that no reader parses it out of the message.
    run: int | None = None

    def __str__(self) -> str:
        where = []
        if self.rank is not None:
            where.append(f"rank {self.rank}")
        if self.step is not None:
            where.append(f"step {self.step}")
        head = f"{self.check}: {self.message}" + (f" ({', '.join(where)})" if where else "")
        head = f"warning: {head}" if self.warning else head
        return head + (f". Usual cause: {self.cause}" if self.cause else "")


@dataclass(frozen=True)
class RankView:
    """What a rank ended with, as a check sees it."""

    rank: int
    # passed | failed | released | hung | crashed: the values of ``_report.Status``, a layer
    # above the runtime, which writes them as text
    status: str
    exception_type: str = ""
    exception_message: str = ""
    evidence: str = ""  # where a hung rank waited, how a crashed one died
    # What its launcher would see it exit with (0 a return, 128+N signal N; None: the
    # runner ended it, hung or released); ``_report.RankResult.exit_status``.
    exit_status: int | None = None


@dataclass
class Evidence:
    """Everything a judge sees: every rank's events and how each rank ended."""

    events: list[Event]
    ranks: dict[int, RankView] = field(default_factory=dict)
    schedule: Any = None
    target: str = ""  # the example's target (a World's); "" in-process
    attempts: tuple[Evidence, ...] = ()  # a restarted job's earlier runs, in order
    # In-process, what identifies the program that ran under inject() (its own frames,
    # its LightningModule, the pytest test: ``_runtime/_program.py``); "" in a World,
    # whose target names it. The fault-free references a check keeps are per program.
    program: str = ""

    @property
    def fault_free(self) -> bool:
        """Run with the empty schedule: no fault, no memory budget, no restart."""
        return not self.schedule

    def observations(self, check: str) -> Iterator[tuple[Event, dict[str, Any]]]:
        for event in self.events:
            if event.kind == OBSERVATION and event.site == check:
                yield event, json.loads(event.detail)
