"""What a hang's verdict says: the cause first, then where each rank waits, then the usual
cause of that shape of hang (and of its cousin, a collective whose ranks disagree on the
size of the data, which gloo aborts on).

A hang is the consequence; its cause is often a rank that is not waiting at all. Three
shapes are told apart from facts the run recorded:

- a rank **caught an injected error** (OOM, an exception) and went on: it skipped a step
  its peers took, so their collectives no longer pair up;
- a rank **returned** from the target while its peers still wait: the ranks ran different
  numbers of batches or collectives;
- a rank waits in a collective **the program's own code issued** (a hook's
  ``save_checkpoint``, a rank-conditional barrier): that collective runs on some ranks
  only.
"""

from __future__ import annotations

import re

from chaoslight._report import HUNG, PASSED, Outcome, cause_first
from chaoslight._schedule import Fault

CAUGHT_CAUSE = (
    "an error caught on one rank only and its step skipped or replaced there (a constant "
    "loss has no graph: DDP's gradient all-reduce never runs on that rank): let the error "
    "end the rank, or agree on the skip with a collective every rank joins"
)
RETURNED_CAUSE = (
    "the ranks ran different numbers of batches or collectives: data that gives the ranks "
    "different numbers of batches (an IterableDataset or sampler that does not even them "
    "out), or a stop decided on one rank (trainer.should_stop set from a rank-local value)"
)
OWN_COLLECTIVE_CAUSE = (
    "a collective, or a Lightning call that contains one (trainer.save_checkpoint, "
    "self.log(sync_dist=True), self.all_gather, strategy.barrier or reduce), run on some "
    "ranks only: under a rank condition, or in an exception handler"
)


# gloo's words when the ranks of one collective send different amounts of data.
SIZE_MISMATCH = (
    "Received data size doesn't match expected size",
    "op.preamble.length <= op.nbytes",
    "Detected mismatch between collectives",
)
SIZE_MISMATCH_CAUSE = (
    "a collective whose tensors differ in shape or dtype between ranks (an all_gather of "
    "a tensor whose length depends on the rank's data: pad it to a common length first, "
    "or gather objects)"
)


def mismatch_cause(outcome: Outcome) -> str:
    """The usual cause when a rank's error or output shows a size mismatch, else ''."""
    for result in outcome.ranks:
        text = f"{result.exception or ''}\n{result.output or ''}\n{result.evidence or ''}"
        if any(words in text for words in SIZE_MISMATCH):
            return SIZE_MISMATCH_CAUSE
    return ""


def hang_reason(outcome: Outcome, fired: list[tuple[int, Fault]]) -> str:
    """The verdict's reason for a hung run: cause first, evidence, usual cause."""
    caught, handling = _caught(outcome, fired)
    returned = _returned(outcome)
    named: tuple[str, ...] = (caught, returned, cause_first(outcome))
    culprit = outcome.culprit
    if not caught and culprit is not None and culprit.fault:
        # cause_first names the rank an injected fault fired on first: before the ranks
        # that returned around it (a rank that skipped a collective returns early).
        named = (cause_first(outcome), returned)
    reason = "; ".join(part for part in named if part)
    if caught and not handling:
        usual = CAUGHT_CAUSE
    elif returned:
        usual = RETURNED_CAUSE
    elif any(r.status == HUNG and r.in_own_collective for r in outcome.ranks):
        usual = OWN_COLLECTIVE_CAUSE
    else:
        return reason
    return f"{reason}. Usual cause: {usual}"


def _caught(outcome: Outcome, fired: list[tuple[int, Fault]]) -> tuple[str, bool]:
    """'rank 0 caught the injected oom@... and went on', for a faulted rank that did not
    end by its error (it returned or hung past it); 'rank 0 hung while handling ...' (and
    True) when it hung inside Lightning's exception handling (an on_exception hook)."""
    by_rank = {r.rank: r for r in outcome.ranks}
    for rank, fault in fired:
        result = by_rank.get(rank)
        if not fault.catchable or result is None or result.status not in (HUNG, PASSED):
            continue
        if result.status == HUNG and _HANDLING.search(result.stacks or ""):
            return f"rank {rank} hung while handling the injected {fault} (in on_exception)", True
        went = "returned" if result.status == PASSED else "went on"
        return f"rank {rank} caught the injected {fault} and {went}, and the job hung", False
    return "", False


# A faulthandler frame of Lightning's exception handling around fit (either flavour).
_HANDLING = re.compile(r"line \d+ in (_interrupt|on_exception)\n")


def _returned(outcome: Outcome) -> str:
    """'rank 1 returned (its last step 3) while rank 0 still waits', when some did."""
    left = [r.rank for r in outcome.ranks if r.status == PASSED]
    waiting = [r.rank for r in outcome.ranks if r.status == HUNG]
    if not left or not waiting:
        return ""
    steps = _last_steps(outcome)
    gone = ", ".join(f"rank {r} returned{_step(steps, r, ' (its last step {})')}" for r in left)
    still = ", ".join(f"rank {r}{_step(steps, r, ' (at step {})')}" for r in waiting)
    return f"{gone} while {still} still {'waits' if len(waiting) == 1 else 'wait'} for it"


def _last_steps(outcome: Outcome) -> dict[int, int]:
    last: dict[int, int] = {}
    for event in outcome.events:
        if event.step is not None and event.rank is not None:
            last[event.rank] = max(last.get(event.rank, event.step), event.step)
    return last


def _step(steps: dict[int, int], rank: int, words: str) -> str:
    """``words`` with the rank's last recorded step; nothing when its events hold none
    (its evidence says where it is)."""
    return words.format(steps[rank]) if rank in steps else ""
