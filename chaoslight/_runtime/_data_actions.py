"""The actions of the kinds that damage data instead of raising (``_schedule/_data_faults``):
entered in ``_actions.ACTIONS`` beside every other kind's, written here with their sites.

Each is called as ``action(engine, fault, firing)`` before the wrapped call. A flip acts
at once, on the trainer's tensors; the others wrap the call itself (``firing.around``):
the fetch or the load runs, and reads what the fault says it reads.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from chaoslight._runtime._deliberate import mark
from chaoslight._runtime._events import NOTE
from chaoslight._schedule._data_faults import BadCheckpoint, DropBatch, Flip, RepeatBatch
from chaoslight._sites._batches import read_past, read_twice
from chaoslight._sites._damage import damaged_load
from chaoslight._sites._flip import flip_bit


def apply_flip(engine: Any, fault: Flip, firing: Any) -> None:
    """Flip the bit now; the rank's event log notes which element changed, and how."""
    with engine.internal():
        detail = flip_bit(engine.tensors_owner, fault.target, fault.tensor, fault.index, fault.bit)
    engine.record(NOTE, fault.site, firing.rank, firing.step, str(fault), detail=detail)


def apply_repeat_batch(engine: Any, fault: RepeatBatch, firing: Any) -> None:
    firing.around.append(read_twice)


def apply_drop_batch(engine: Any, fault: DropBatch, firing: Any) -> None:
    firing.around.append(read_past)


def apply_bad_checkpoint(engine: Any, fault: BadCheckpoint, firing: Any) -> None:
    firing.around.append(partial(damaged_load, effect=fault.effect, mark=mark))
