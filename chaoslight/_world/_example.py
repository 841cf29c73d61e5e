"""One example in flight, seen from the parent: every rank's messages until each has ended.

Each rank ends in one of three ways: its ``result`` message arrives (it returned or
raised, perhaps after its watchdog fired), its pipe closes (the process died), or the
World kills it (still running ``RELEASE_GRACE_S`` after the first hang report, or
silent for the timeout plus ``SILENCE_S``: stuck with the GIL held).

A hang is usually seen long before the timeout, at the wavefront (``_wavefront``): every
pending rank blocked in a collective, their collectives differ or a rank has ended. The
parent then tells each pending rank that it is hung (it reports where it is), and once
every one has answered (or ``ACK_S`` later) tells them to let go of their collectives:
released first, a rank could end with gloo's error before it knew it was hung.
"""

from __future__ import annotations

import selectors
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaoslight._report import CRASHED, HUNG, PASSED, RankResult, death_line, settle
from chaoslight._runtime._events import NOTE, Event, merge, read_event_log
from chaoslight._sites import _damage
from chaoslight._world._pump import pump
from chaoslight._world._slot import Slot
from chaoslight._world._wavefront import (
    TICK_S,
    Front,
    HangDecider,
    HangDecision,
    RankState,
)
from chaoslight._world._wire import (
    Beat,
    Dump,
    Ended,
    Hang,
    Reply,
    Snapshot,
    decode_pickle,
)

RELEASE_GRACE_S = 3.0  # after the first hang report, ranks still running are killed
SILENCE_S = 3.0  # a running rank silent for timeout + this is stuck with the GIL held
WAVEFRONT = True  # False: only the watchdogs' timeout finds hangs (for comparison)
ACK_S = 1.0  # ranks told they are hung are released once all answered, or after this
DURING = (Beat, Hang, Snapshot, Ended)  # the replies about one example, naming it by its id


@dataclass
class Watch:
    """What the parent knows about one rank during one example."""

    heard: float
    result: Ended | None = None
    died: bool = False
    killed: bool = False
    hang: Hang | None = None
    snapshot: Snapshot | None = None
    asked: bool = False
    ended_s: float | None = None  # seconds from the example's start to its result or death
    front: Front | None = None  # the collective it last said it is blocked in
    front_at: float = 0.0

    @property
    def pending(self) -> bool:
        return self.result is None and not self.died and not self.killed

    def take(self, msg: Reply) -> bool:
        """Record one message from the rank; True if it reports a hang."""
        if isinstance(msg, Hang):
            self.hang = msg
            return True
        if isinstance(msg, Beat):
            self.front, self.front_at = msg.front, time.monotonic()
        elif isinstance(msg, Snapshot):
            self.snapshot = msg
        elif isinstance(msg, Ended):
            self.result = msg
        return False


class Example:
    """The parent's side of one ``run``: ``collect()`` the messages, then ``results()``."""

    def __init__(
        self,
        ident: int,
        slots: list[Slot],
        timeout: float,
        folder: Path,
        selector: selectors.BaseSelector,
    ) -> None:
        self.ident, self.slots, self.timeout = ident, slots, timeout
        self.folder, self.selector = folder, selector
        self.offsets = {slot.rank: slot.output_size() for slot in slots}
        self.start = time.monotonic()
        self.wall_s = 0.0
        self.watches = {slot.rank: Watch(heard=self.start) for slot in slots}
        self.first_hang: float | None = None
        self.decider = HangDecider()
        self.decision: HangDecision | None = None  # why the wavefront says the example is hung
        self.let_go = False  # whether the ranks it names were told to leave their collectives
        # The example's own, in the World's folder (gone with it, should the parent die): a
        # rank (told by ``RunExample.ledger``) backs up there what its faults damage, and the
        # parent puts it back when the example is over (a crashed rank cannot).
        self.ledger = _damage.make_ledger(folder.parent)

    def events_path(self, rank: int) -> Path:
        return self.folder / f"rank{rank}.events.jsonl"

    def collect(self) -> None:
        """Read messages until every rank has answered, died, or been killed after a hang."""
        try:
            self._collect()
        except BaseException:  # Ctrl-C: results() will not come; the user's files go back
            _damage.settle(self.ledger)
            raise

    def _collect(self) -> None:
        while any(w.pending for w in self.watches.values()):
            now = time.monotonic()
            self._check_silences(now)
            if self.first_hang is not None:
                self._ask_positions()
                if now >= self.first_hang + RELEASE_GRACE_S:
                    self._kill_pending()
                    break
            for slot, msg in pump(self.selector, self._wake_at(now)):
                watch = self.watches.get(slot.rank)
                if watch is None or slot not in self.slots:
                    continue
                watch.heard = time.monotonic()
                if msg is None:
                    watch.died = True
                elif isinstance(msg, DURING) and msg.id == self.ident and watch.take(msg):
                    self._hung(watch.heard)
                if not watch.pending and watch.ended_s is None:
                    watch.ended_s = watch.heard - self.start
            if WAVEFRONT and (self.first_hang is None or self.decision is not None):
                self._check_wavefront(time.monotonic())
        self.wall_s = time.monotonic() - self.start

    def results(self) -> tuple[tuple[RankResult, ...], list[Event]]:
        """Every rank's result (settled: see ``_outcome.settle``) and the merged events;
        then the files the ranks' faults damaged go back (``_sites._damage``): now, or at
        the end of the job when the example is one run of a schedule with restarts."""
        try:
            logs = [read_events(self.events_path(slot.rank), slot.rank) for slot in self.slots]
            events = merge(event for log in logs for event in log)
            results = [
                rank_result(
                    slot,
                    self.watches[slot.rank],
                    slot.output_since(self.offsets[slot.rank]),
                    events,
                    self.decision.fronts.get(slot.rank) if self.decision is not None else None,
                )
                for slot in self.slots
            ]
            return settle(results), events
        finally:
            _damage.settle(self.ledger)

    def _hung(self, when: float) -> None:
        if self.first_hang is None:
            self.first_hang = when

    def _check_silences(self, now: float) -> None:
        for rank, watch in self.watches.items():
            limit = self.timeout + SILENCE_S  # the watchdog thread beats every second
            if watch.pending and watch.hang is None and now - watch.heard > limit:
                silent = f"{now - watch.heard:.1f} s without a message"
                watch.hang = Hang(self.ident, rank, f"rank {rank} stopped answering ({silent})")
                self._hung(now)

    def _seen(self) -> list[RankState]:
        out = []
        for rank, watch in self.watches.items():
            ended = None if watch.ended_s is None else self.start + watch.ended_s
            how = "died" if watch.died else "returned"
            if watch.result is not None and watch.result.status != PASSED:
                how = "raised"
            out.append(RankState(rank, watch.pending, watch.front, watch.front_at, ended, how))
        return out

    def _check_wavefront(self, now: float) -> None:
        """Every pending rank blocked where no peer can meet it: hung; then release them."""
        if self.decision is None:
            self.decision = self.decider.decide(now, self._seen())
            if self.decision is None:
                return
            self._hung(now)
            for slot in self._blocked():
                self.watches[slot.rank].asked = True  # it reports its position with the hang
                slot.send(Dump(self.ident, hung=self.decision.why(slot.rank)))
        elif not self.let_go:
            # A rank stopped for good can neither answer nor end: not waited for.
            answered = all(
                self.watches[slot.rank].hang is not None
                for slot in self._blocked()
                if not self._frozen_for_good(slot)
            )
            if answered or now >= (self.first_hang or now) + ACK_S:
                self.let_go = True
                for slot in self._blocked():
                    slot.send(Dump(self.ident, release=True))
                    if self._frozen_for_good(slot):  # killed now, not at the release grace
                        slot.kill()
                        self.watches[slot.rank].killed = True

    def _frozen_for_good(self, slot: Slot) -> bool:
        front = self.watches[slot.rank].front
        return front is not None and front.frozen_for_good

    def _blocked(self) -> list[Slot]:
        """The slots of pending ranks the decision names."""
        fronts = self.decision.fronts if self.decision is not None else {}
        return [s for s in self.slots if self.watches[s.rank].pending and s.rank in fronts]

    def _wake_at(self, now: float) -> float:
        times = [now + 1.0]
        if WAVEFRONT and self.first_hang is None and self.decider.watching(self._seen()):
            times.append(now + TICK_S)
        if self.decision is not None and not self.let_go and self.first_hang is not None:
            times.append(self.first_hang + ACK_S)
        if self.first_hang is not None:
            times.append(self.first_hang + RELEASE_GRACE_S)
        times += [w.heard + self.timeout + SILENCE_S for w in self.watches.values() if w.pending]
        return min(times)

    def _ask_positions(self) -> None:
        """Ask ranks still running, whose own watchdog has not fired, where they are."""
        for slot in self.slots:
            watch = self.watches[slot.rank]
            if watch.pending and watch.hang is None and not watch.asked:
                watch.asked = True
                slot.send(Dump(self.ident))

    def _kill_pending(self) -> None:
        for slot in self.slots:
            if self.watches[slot.rank].pending:
                slot.kill()
                self.watches[slot.rank].killed = True


def read_events(path: Path, rank: int) -> list[Event]:
    """Rank ``rank``'s event log (``read_event_log``): a last line cut short by a kill is
    skipped; other lines that are not events are skipped and said so in a note."""
    log = read_event_log(path)
    if not log.malformed:
        return list(log.events)
    plural = "s" if log.malformed != 1 else ""
    detail = f"{log.malformed} malformed line{plural} skipped in {path.name}"
    note = Event(NOTE, "event log", rank, None, time.monotonic(), time.time(), detail=detail)
    return [*log.events, note]


def returned_value(blob: str | None) -> Any:
    """The value a rank returned, or None where it could not be sent or is not importable
    here (``value_repr`` still says what it was)."""
    if blob is None:
        return None
    try:
        return decode_pickle(blob)
    except Exception:
        return None


def rank_result(
    slot: Slot, watch: Watch, output: str, events: list[Event], decided: Front | None = None
) -> RankResult:
    """One rank's result from what the parent saw: a result message, a kill, or a death.
    ``decided`` is where the rank was blocked when the hang was decided: once the World
    releases the ranks, a later beat may already say it moved on."""
    seen = watch.hang or watch.snapshot
    line, stacks = (seen.line, seen.stacks) if seen is not None else ("", "")
    front = decided or watch.front
    own = front is not None and front.by_program
    if watch.result is not None:
        msg = watch.result
        return RankResult(
            slot.rank,
            HUNG if msg.hung else msg.status,
            msg.exception,
            returned_value(msg.value),
            msg.value_repr,
            evidence=line,
            stacks=stacks,
            output=output,
            pid=slot.pid,
            ended_s=watch.ended_s,
            in_own_collective=own,
        )
    if watch.killed:
        if front is not None and front.frozen:
            # The freeze fault stopped it; it was never hung in its own right.
            line = f"rank {slot.rank} {front.describe()} (the injected freeze)"
        line = line or f"rank {slot.rank} did not come back after the hang"
        return RankResult(
            slot.rank,
            HUNG,
            evidence=line + "; killed",
            stacks=stacks,
            output=output,
            pid=slot.pid,
            in_own_collective=own,
        )
    code = slot.reap()
    signum = -code if code is not None and code < 0 else None
    return RankResult(
        slot.rank,
        CRASHED,
        signal=signum,
        exitcode=code if signum is None else None,
        evidence=death_line(slot.rank, code, output, events),
        output=output,
        pid=slot.pid,
        ended_s=watch.ended_s,
    )
