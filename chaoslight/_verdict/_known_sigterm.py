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

Each signature below needs Lightning's handler to have taken a SIGTERM, and reads
evidence that only the shifted sequence leaves; a failure with the ranks stopped
together and no such evidence (a program's own collective in ``on_exception`` after a
clean, common stop) stays the program's (``examples/known_issues/preemption_own_bug.py``).
What it claims is the ranks whose end is a collective's (``collective_ends``): once the
sequences are shifted, every wait in a collective, every release from one and every
abort on a pair of sizes follows from the shift, whatever else fired. A rank that ended
otherwise (its own error, an injected error it raised or swallowed, a crash) is not
claimed: the oracle judges it by the faults that fired.
"""

from __future__ import annotations

from chaoslight._checks._exits import ExitStatus
from chaoslight._report import CRASHED, FAILED, HUNG, PASSED, RELEASED, ExceptionInfo, Outcome
from chaoslight._verdict._hangs import SIZE_MISMATCH
from chaoslight._verdict._known_frames import (
    blocked_at,
    collective_callers,
    collective_ends,
    in_lightning,
    raised_in_loops,
)
from chaoslight._verdict._known_issue import NOTHING, Claimed
from chaoslight._verdict._preemption import Delivery, deliveries, stopping_steps

# Lightning's SIGTERM broadcasts (2.5.2-2.6.x), by the file and function that issue them:
# the one inside its signal handler, and the one at the start of every training batch.
_HANDLER_BROADCAST = ("trainer/connectors/signal_connector.py", "_sigterm_notifier_fn")
_SIGTERM_BROADCASTS = (
    _HANDLER_BROADCAST,
    ("loops/training_epoch_loop.py", "_broadcast_sigterm_tensor"),
)


def stuck_in_handler_broadcast(outcome: Outcome, taken: list[Delivery]) -> bool:
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
    if not taken:
        return False
    handler = (_HANDLER_BROADCAST,)
    return any(
        in_lightning(caller, handler)
        for result in outcome.ranks
        for caller in collective_callers(result)
    )


def _stopped_apart(outcome: Outcome) -> bool:
    return len(set(stopping_steps(outcome).values())) > 1


def broadcast_in_handler(outcome: Outcome, taken: list[Delivery]) -> bool:
    """Lightning's handler took the SIGTERM, nothing but preemptions struck, and a rank
    was blocked in Lightning's SIGTERM broadcast (the handler's or the per-batch one)
    while a peer was in a different collective or had ended, or the ranks stopped at
    different steps. Found by the default search on
    ``examples/known_issues/sigterm_beside_faults.py:train_fixed`` (a SIGTERM at
    ``on_train_start`` on rank 0, two delays beside it): rank 0 waited in the per-batch
    broadcast while rank 1, which had read the flag in the broadcast before, waited in
    that function's barrier: one caller, two collectives."""
    if not taken:
        return False
    where = {r.rank: blocked_at(r) for r in outcome.ranks}
    for rank, at in where.items():
        if at is None or not in_lightning(at[0], _SIGTERM_BROADCASTS):
            continue
        # Another collective: another caller, or the same one's other collective (the
        # per-batch check's broadcast against its barrier).
        if _stopped_apart(outcome) or any(w != at for r, w in where.items() if r != rank):
            return True
    return False


# Python's words between a handled exception and the one raised while handling it.
_HANDLING = "During handling of the above exception, another exception occurred:"


def stopped_by_lightning(exc: ExceptionInfo | None) -> bool:
    """The rank was stopped by Lightning's own SIGTERMException, raised in its loops: as it
    is, or turned by the program's handler of it into an exit of its own choosing
    (``except SIGTERMException: ...; sys.exit(143)``, the exit-status workaround). The
    stop is Lightning's either way; the exit code is the program's."""
    if exc is None:
        return False
    if exc.type == "SIGTERMException":
        return raised_in_loops(exc.traceback)
    handled, found, _ = (exc.traceback or "").rpartition(_HANDLING)
    lines = [line for line in handled.strip().splitlines() if line.strip()]
    return (
        exc.type == "SystemExit"
        and bool(found)
        and bool(lines)
        and "SIGTERMException" in lines[-1]
        and raised_in_loops(handled)
    )


def stopped_alone(outcome: Outcome, taken: list[Delivery], agreed: bool = True) -> bool:
    """Nothing but preemptions struck; a signalled rank raised Lightning's own
    SIGTERMException (from its loops) while a peer, not stopped with it (not signalled, or
    stopped at another step), was released by a transport error or hung. With ``agreed``
    False (a release in which nothing makes the ranks agree on a stop), a signalled peer
    left in a collective did not stop with it whatever step it is said to have reached:
    each rank reads its own flag at its own batch end, and the SIGTERM landed between
    the two reads (after the peer's, before the stopped rank's)."""
    if not taken:
        return False
    signalled = {d.rank for d in taken}
    alone = {
        r.rank
        for r in outcome.ranks
        if r.rank in signalled and r.status == FAILED and stopped_by_lightning(r.exception)
    }
    left = [r for r in outcome.ranks if r.rank not in alone and r.status in (RELEASED, HUNG)]
    apart = not agreed or _stopped_apart(outcome)
    return bool(alone) and any(r.rank not in signalled or apart for r in left)


def mismatch_after_handler(outcome: Outcome, taken: list[Delivery]) -> bool:
    """Lightning's handler took the SIGTERM, nothing but preemptions struck, and a rank
    died of gloo's size-mismatch abort: the handler's ``dist.broadcast`` runs wherever the
    signal lands and pairs with whatever collective a peer is in (DDP's buffer broadcast
    at forward start, a ``sync_dist`` reduce), and the first collective that pairs two
    different sizes is that one. No stack shows the handler's frame then: the peer dies
    in its own collective, and the signalled rank is released from its next one."""
    if not taken:
        return False
    return any(
        r.status == CRASHED and any(words in (r.output or "") for words in SIZE_MISMATCH)
        for r in outcome.ranks
    )


def broadcast_or_alone(outcome: Outcome, taken: list[Delivery]) -> Claimed:
    """2.5.2-2.6.x: a rank was stuck in the handler's broadcast
    (``stuck_in_handler_broadcast``), the per-batch broadcast left a peer behind
    (``broadcast_in_handler``), a signalled rank stopped alone (``stopped_alone``: the
    per-batch broadcast carries rank 0's flag only, so a SIGTERM that reached another rank
    alone is seen by that rank's own check at its batch's end, which raises while its
    peers go on into the next batch's broadcast), or gloo aborted on the sizes of a pair
    the shift made (``mismatch_after_handler``)."""
    shifted = (
        stuck_in_handler_broadcast(outcome, taken)
        or broadcast_in_handler(outcome, taken)
        or stopped_alone(outcome, taken)
        or mismatch_after_handler(outcome, taken)
    )
    return Claimed(collective_ends(outcome)) if shifted else NOTHING


def stopped_alone_claims(outcome: Outcome, taken: list[Delivery]) -> Claimed:
    """Up to 2.5.1: a signalled rank stopped alone (``stopped_alone``; nothing in these
    releases makes the ranks agree on the step they stop at); its peers' ends in a
    collective are the issue's (the stopped rank itself ended by the notice)."""
    alone = stopped_alone(outcome, taken, agreed=False)
    return Claimed(collective_ends(outcome)) if alone else NOTHING


def exit_zero_on_sigterm(outcome: Outcome, taken: list[Delivery]) -> Claimed:
    """Lightning#19916: the exit-status check failed the job, and in the run it names
    (``Violation.run``: the last, or an earlier run of a restarted job) Lightning's handler
    took a SIGTERM and every rank that did not return raised Lightning's SIGTERMException
    from its loops, a SystemExit with no code: exit status 0. It claims those exit-status
    violations and nothing else: another check's violation in the same job stays the
    program's. A program's own exit 0 is not Lightning's."""
    runs = (*outcome.attempts, outcome)
    claimed = tuple(
        violation
        for violation in outcome.violations
        if violation.check == ExitStatus.name
        and violation.any_end
        and not violation.warning
        and _stopped_by_lightning_with_zero(_named_run(runs, violation.run))
    )
    return Claimed(violations=claimed)


def _named_run(runs: tuple[Outcome, ...], number: int | None) -> Outcome:
    """The run a violation names (1 the first); the last when it names none."""
    return runs[number - 1] if number is not None and 0 < number <= len(runs) else runs[-1]


def _stopped_by_lightning_with_zero(run: Outcome) -> bool:
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
