"""Fault kinds that damage data instead of raising: a flipped bit, a batch read twice or
lost, a checkpoint that reads back damaged.

Kept beside ``_faults.py`` (which imports and re-exports them, so they are registered
with every other kind) to hold that module within its size budget; each is one kind as
``_kind.py`` describes, with its action in ``_runtime/_actions.py`` and its strategy in
``_search/_strategies.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from chaoslight._schedule._catalog import BATCHES, LOAD
from chaoslight._schedule._kind import Fault, Severity, fault_kind
from chaoslight._schedule._validate import (
    COUNT_WHY,
    MAX_COUNT,
    check_bounded_int,
    check_choice,
)

FLIP_TARGETS = ("param", "grad", "optimizer_state")
FLIP_BITS = ("exponent", "sign")
CHECKPOINT_EFFECTS = ("truncated", "empty", "missing")

# What a load of a damaged or missing checkpoint raises, as torch and Lightning word it
# (torch 2.x's zip reader, pickle's end of input, a missing path).
LOAD_ERROR_MARKS = (
    "PytorchStreamReader failed",
    "EOFError",
    "UnpicklingError",
    "No such file or directory",
    "Checkpoint file not found",
)
# A frame of torch's own load in a traceback: whatever the reader under it raised for the
# damaged file (Lightning 2.5's fsspec file object fails a short file's seek with
# ``OSError: [Errno 22] Invalid argument`` where a plain file gives PytorchStreamReader's).
LOAD_FRAME = re.compile(r'serialization\.py", line \d+, in _?load\b')


@fault_kind
@dataclass(frozen=True)
class Flip(Fault):
    """Silent data corruption: flip one bit of one element of a tensor on the rank, as a
    flaky GPU does, and raise nothing.

    ``target`` is ``param`` (the LightningModule's parameters, in ``named_parameters()``
    order), ``grad`` (their gradients, where present) or ``optimizer_state`` (the first
    optimizer's state tensors: momentum, Adam's moments). ``tensor`` picks one of them and
    ``index`` one element of it, each modulo their count, so the same schedule always hits
    the same element. ``bit`` is ``exponent`` (the highest exponent bit: a value below 1 in
    magnitude becomes about 2**128 times larger, one in [1, 2) Inf or NaN, one of 2 or
    more nearly 0) or ``sign``. It acts
    when the site is reached, before the call: at ``lightning.on_before_optimizer_step`` a
    gradient is flipped after DDP's all-reduce, before the optimizer uses it (at
    ``lightning.optimizer_step`` the step's gradients are not computed yet). The rank's event log
    notes which element changed, from what to what (or that there was none to flip).

    The oracle judges it as a desync (no correct program is expected to survive it; only a
    hang is a finding): a run that shows no trace of it (replicas in sync, every loss
    finite) is noted as *undetected*, never failed, because correct programs can absorb a
    flip too (docs/explanation/oracle.md).
    """

    kind: ClassVar[str] = "flip"
    severity: ClassVar[Severity] = Severity.DESYNC
    silent: ClassVar[bool] = True
    drawn_by_default: ClassVar[bool] = True
    simplicity: ClassVar[int] = 9
    target: str = "param"
    tensor: int = 0
    index: int = 0
    bit: str = "exponent"

    def _validate(self) -> None:
        check_choice("target", self.target, FLIP_TARGETS)
        check_bounded_int("tensor", self.tensor, 0, MAX_COUNT, COUNT_WHY)
        check_bounded_int("index", self.index, 0, MAX_COUNT, COUNT_WHY)
        check_choice("bit", self.bit, FLIP_BITS)


@fault_kind
@dataclass(frozen=True)
class RepeatBatch(Fault):
    """A flaky storage read on the rank: the batch read for ``step`` is read again for the
    next step, in place of the batch that belonged there (lost: no rank trains on it).

    The rank's epoch keeps its length and every collective its partner, so a correct
    program goes on (or fails cleanly if it checks its data and finds the repeat): judged
    as a hard fault. The data checks (``data-order``, ``disjoint-shards``) do not judge the
    rank's epoch where it fired. Where the batch was the epoch's last, nothing repeats.
    """

    kind: ClassVar[str] = "repeat_batch"
    needs: ClassVar[str | None] = BATCHES
    alters_data: ClassVar[bool] = True
    # Nothing is raised into the program: an error its rank ends with after the repeat is
    # the program's own reaction to its data (an assert that found it).
    raises_nothing: ClassVar[bool] = True
    drawn_by_default: ClassVar[bool] = True
    simplicity: ClassVar[int] = 10


@fault_kind
@dataclass(frozen=True)
class DropBatch(Fault):
    """A flaky storage read on the rank: the batch read for ``step`` is lost, and the next
    one is trained on in its place, so the rank's epoch is one batch shorter.

    No correct DDP program survives it without uneven-input handling (``Join``): the
    rank runs out of batches one step before its peers, which wait in a collective it
    never joins. Judged as a desync (only a hang is a finding: a job should fail fast,
    e.g. by its collective timeout); not drawn by the default search.
    """

    kind: ClassVar[str] = "drop_batch"
    needs: ClassVar[str | None] = BATCHES
    severity: ClassVar[Severity] = Severity.DESYNC
    alters_data: ClassVar[bool] = True
    simplicity: ClassVar[int] = 11


@fault_kind
@dataclass(frozen=True)
class BadCheckpoint(Fault):
    """A checkpoint that reads back damaged on the rank: the load at the site sees the
    file ``truncated`` (its first half), ``empty``, or ``missing`` (deleted since it was
    written), and raises what torch or Lightning raises for that.

    The user's file is never touched: a damaged copy is loaded in its place (a missing
    one raises ``FileNotFoundError`` as the load would). A correct program fails cleanly
    (the load's error ends the rank) or falls back consistently (an older checkpoint, or
    from scratch on every rank): judged as a hard fault. It fires where the site is
    reached: a load happens when a job resumes, or where the program loads a file itself.
    """

    kind: ClassVar[str] = "bad_checkpoint"
    needs: ClassVar[str | None] = LOAD
    catchable: ClassVar[bool] = True
    drawn_by_default: ClassVar[bool] = True
    simplicity: ClassVar[int] = 12
    effect: str = "truncated"

    def _validate(self) -> None:
        check_choice("effect", self.effect, CHECKPOINT_EFFECTS)

    def aborts(self) -> bool:
        return self.effect == "missing"  # a damaged copy is read; a missing file is not

    def surfaced_in(self, error_text: str) -> bool:
        marked = any(mark in error_text for mark in LOAD_ERROR_MARKS)
        return marked or LOAD_FRAME.search(error_text) is not None
