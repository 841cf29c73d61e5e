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
        engine.record(
            NEVER_FIRED,
            fault.site,
            rank,
            None,
            str(fault),
            detail=where_it_ran(engine, fault, rank),
        )


def where_it_ran(engine: Any, fault: Any, rank: int) -> str:
    """Where ``fault``'s site ran on ``rank`` instead. The engine saw every call of a site
    at the steps where one of its faults could fire; at the others, a site whose gate
    closed (``_gates.py``) was not watched: of such a site only the fault's own step is
    known, and whether the run got there."""
    site, step = fault.site, fault.step
    steps = engine.counts().steps_seen.get(site)
    if step is not None and site in engine.gates.unwatched:
        if steps and step in steps:
            return f"{site} was reached on rank {rank} at step {step}"
        last = engine.clock.last_step
        if last is None or step > last:
            ran = "no step" if last is None else f"up to step {last}"
            return f"rank {rank} trained {ran}: step {step} was never reached"
        return f"{site} was not reached on rank {rank} at step {step}"
    if steps:
        return f"{site} was reached on rank {rank} at steps " + ", ".join(
            "None" if s is None else str(s) for s in steps
        )
    return f"{site} was never reached on rank {rank}"
