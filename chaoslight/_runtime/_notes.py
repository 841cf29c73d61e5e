"""Notes an engine leaves in the event log when it closes: faults that never fired, and
why (where their site ran instead, or that they are bound to a later run)."""

from __future__ import annotations

from typing import Any

from chaoslight._runtime._context import current_rank
from chaoslight._runtime._events import NEVER_FIRED


def note_never_fired(engine: Any) -> None:
    """A NOTE per fault meant for this rank that never fired, saying where its site ran.

    Only from a process that ran a Trainer: a launcher's own process (torchrun's agent,
    armed by ``chaoslight run`` like every Python process) trains nothing."""
    if not engine.ran_a_trainer:
        return
    rank = current_rank(engine.environment_rank)
    for index, fault in enumerate(engine.schedule.faults):
        if engine.fired[index] or fault.rank not in (None, rank):
            continue
        if not fault.fires_in(1):
            where = (
                f"run={fault.run} binds it to run {fault.run} of a schedule with restarts; "
                "inject() and chaoslight run make one run, run 1 (a World runs the restarts)"
            )
            engine.record(NEVER_FIRED, fault.site, rank, None, str(fault), detail=where)
            continue
        steps = engine.counts().steps_seen.get(fault.site)
        where = (
            f"{fault.site} was reached on rank {rank} at steps "
            + ", ".join("None" if s is None else str(s) for s in steps)
            if steps
            else f"{fault.site} was never reached on rank {rank}"
        )
        engine.record(NEVER_FIRED, fault.site, rank, None, str(fault), detail=where)
