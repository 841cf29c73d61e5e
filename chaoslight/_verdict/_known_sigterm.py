"""Signatures of Lightning's own SIGTERM path failing a correct program (the table is in
``_known.py``).

Lightning 2.5.2-2.6.x answers SIGTERM with two collectives (``signal_connector.py``,
``training_epoch_loop.py``):

- its handler, ``_sigterm_notifier_fn``, calls ``dist.broadcast(tensor([1]), src=0)``
  from inside the signal handler, that is wherever the main thread happens to be when
  Python runs it: inside a step, between steps, in a checkpoint's barrier, in the fit's
  teardown;
- ``_broadcast_sigterm_tensor``, at the start of every training batch, broadcasts rank
  0's flag (an error in that broadcast is swallowed and read as "no SIGTERM").

A collective is matched by its position in each rank's sequence of collectives, not by
its name. The handler's broadcast is one collective more on the ranks it ran on, at a
point of their sequence that the signal's arrival chose: unless every rank ran it at the
same point, from there on the ranks' sequences are shifted by one, and the handler's
broadcast pairs with whatever collective a peer issues next (DDP's gradient all-reduce,
a ``sync_dist`` reduce, a checkpoint's barrier, the per-batch broadcast). What follows
is gloo's choice, not the program's: a size-mismatch abort, a hang, a transport error on
the rank whose peer left, or ranks that stop at different steps. Besides, a SIGTERM that
reached only some ranks is seen by those ranks' own check at their batch's end, which
raises ``SIGTERMException`` on them alone.

Why these are Lightning's failures, reported apart, and neither a wrong verdict nor a
fault drawn where none can strike: a scheduler's SIGTERM arrives at any moment, inside a
step or between steps, on every rank at slightly different times, so the notice the
soak and the search draw (``after=`` seconds past any site) is what a cluster sends; and
the job really does not stop (it hangs, on NCCL until the watchdog, or loses a rank to a
transport error), which the oracle's preemption rule rightly calls a failure. What makes
it fail is Lightning's collective in a signal handler, which no correct program can
avoid short of replacing Lightning's handler (the workaround).

Each signature below needs Lightning's handler to have taken a SIGTERM and nothing but
preemptions (and benign faults) in the run, and reads evidence that only the shifted
sequence leaves; a failure with the ranks stopped together and no such evidence (a
program's own collective in ``on_exception`` after a clean, common stop) stays the
program's (``examples/known_issues/preemption_own_bug.py``).
"""

from __future__ import annotations

from typing import Any

from chaoslight._checks._exits import ExitStatus, run_label
from chaoslight._report import CRASHED, FAILED, HUNG, PASSED, RELEASED
from chaoslight._verdict._hangs import SIZE_MISMATCH
from chaoslight._verdict._known_frames import (
    blocked_in,
    collective_callers,
    in_lightning,
    raised_in_loops,
)
from chaoslight._verdict._known_workers import more_than_a_preemption
from chaoslight._verdict._preemption import Delivery, deliveries, stopping_steps

# Lightning's SIGTERM broadcasts (2.5.2-2.6.x), by the file and function that issue them:
# the one inside its signal handler, and the one at the start of every training batch.
_HANDLER_BROADCAST = ("trainer/connectors/signal_connector.py", "_sigterm_notifier_fn")
_SIGTERM_BROADCASTS = (
    _HANDLER_BROADCAST,
    ("loops/training_epoch_loop.py", "_broadcast_sigterm_tensor"),
)


def stuck_in_handler_broadcast(outcome: Any, taken: list[Delivery]) -> bool:
    """Lightning's handler took the SIGTERM, nothing but preemptions struck, and a rank's
    evidence (its stacks, its fatal signal's dump, the torch.distributed error that
    released it) shows it in the broadcast Lightning's handler issues, whatever its peers
    show.

    That broadcast sends one element from rank 0: when every rank issues it at the same
    point of its sequence of collectives, it completes at once on each. A rank that waited
    in it, was released from it or died in it had it paired with something else: a
    peer's other collective (the handler ran at another point there, or not at all) or a
    peer that had left. That is the shift the handler makes, and no program can prevent
    it: the signal lands where it lands. Every rank in it is no exception: in the soak's
    case (``preempt@dist.broadcast after=0.1`` on every rank of
    ``examples/corpus/resume_last.py:train``) rank 0 ran its handler before a forward and
    rank 1 inside a backward, so each handler's broadcast paired with the other rank's
    DDP collective, and both timed out in ``_sigterm_notifier_fn``. A rank that only
    passed through it (the broadcast completed) leaves no such evidence."""
    if not taken or more_than_a_preemption(outcome):
        return False
    handler = (_HANDLER_BROADCAST,)
    return any(
        in_lightning(caller, handler)
        for result in outcome.ranks
        for caller in collective_callers(result)
    )


def _stopped_apart(outcome: Any) -> bool:
    return len(set(stopping_steps(outcome).values())) > 1


def broadcast_in_handler(outcome: Any, taken: list[Delivery]) -> bool:
    """Lightning's handler took the SIGTERM, nothing but preemptions struck, and a rank
    was blocked in Lightning's SIGTERM broadcast (the handler's or the per-batch one)
    while a peer was in a different collective or had ended, or the ranks stopped at
    different steps."""
    if not taken or more_than_a_preemption(outcome):
        return False
    where = {r.rank: blocked_in(r) for r in outcome.ranks}
    for rank, caller in where.items():
        if caller is None or not in_lightning(caller, _SIGTERM_BROADCASTS):
            continue
        if _stopped_apart(outcome) or any(w != caller for r, w in where.items() if r != rank):
            return True
    return False


def stopped_alone(outcome: Any, taken: list[Delivery]) -> bool:
    """Nothing but preemptions struck; a signalled rank raised Lightning's own
    SIGTERMException (from its loops) while a peer, not stopped with it (not signalled, or
    stopped at another step), was released by a transport error or hung."""
    if not taken or more_than_a_preemption(outcome):
        return False
    signalled = {d.rank for d in taken}
    alone = {
        r.rank
        for r in outcome.ranks
        if r.rank in signalled
        and r.status == FAILED
        and r.exception is not None
        and r.exception.type == "SIGTERMException"
        and raised_in_loops(r.exception.traceback)
    }
    left = [r for r in outcome.ranks if r.rank not in alone and r.status in (RELEASED, HUNG)]
    return bool(alone) and any(r.rank not in signalled or _stopped_apart(outcome) for r in left)


def mismatch_after_handler(outcome: Any, taken: list[Delivery]) -> bool:
    """Lightning's handler took the SIGTERM, nothing but preemptions struck, and a rank
    died of gloo's size-mismatch abort: the handler's ``dist.broadcast`` runs wherever the
    signal lands and pairs with whatever collective a peer is in (DDP's buffer broadcast
    at forward start, a ``sync_dist`` reduce), and the first collective that pairs two
    different sizes is that one. No stack shows the handler's frame then: the peer dies
    in its own collective, and the signalled rank is released from its next one."""
    if not taken or more_than_a_preemption(outcome):
        return False
    return any(
        r.status == CRASHED and any(words in (r.output or "") for words in SIZE_MISMATCH)
        for r in outcome.ranks
    )


def broadcast_or_alone(outcome: Any, taken: list[Delivery]) -> bool:
    """2.5.2-2.6.x: a rank was stuck in the handler's broadcast
    (``stuck_in_handler_broadcast``), the per-batch broadcast left a peer behind
    (``broadcast_in_handler``), a signalled rank stopped alone (``stopped_alone``: the
    per-batch broadcast carries rank 0's flag only, so a SIGTERM that reached another rank
    alone is seen by that rank's own check at its batch's end, which raises while its
    peers go on into the next batch's broadcast), or gloo aborted on the sizes of a pair
    the shift made (``mismatch_after_handler``)."""
    return (
        stuck_in_handler_broadcast(outcome, taken)
        or broadcast_in_handler(outcome, taken)
        or stopped_alone(outcome, taken)
        or mismatch_after_handler(outcome, taken)
    )


def exit_zero_on_sigterm(outcome: Any, taken: list[Delivery]) -> bool:
    """Lightning#19916: the exit-status check failed the job, and in the run it names (the
    last, or "run N of M" of a restarted job) Lightning's handler took a SIGTERM and every
    rank that did not return raised Lightning's SIGTERMException from its loops, a
    SystemExit with no code: exit status 0. A program's own exit 0 is not Lightning's."""
    runs = (*getattr(outcome, "attempts", ()), outcome)
    for violation in outcome.violations:
        if violation.check != ExitStatus.name or not violation.any_end or violation.warning:
            continue
        named = [
            run
            for number, run in enumerate(runs, 1)
            if violation.message.startswith(run_label(number, len(runs)))
        ]
        run = named[0] if named else outcome
        if _stopped_by_lightning_with_zero(run):
            return True
    return False


def _stopped_by_lightning_with_zero(run: Any) -> bool:
    if not any(d.by_lightning for d in deliveries(run)):
        return False
    stopped = [r for r in run.ranks if r.status != PASSED]
    return bool(stopped) and all(
        r.status == FAILED
        and r.exception is not None
        and r.exception.type == "SIGTERMException"
        and r.exception.exit_status == 0
        and raised_in_loops(r.exception.traceback)
        for r in stopped
    )
