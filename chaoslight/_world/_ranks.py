"""The World's rank processes: a worker per rank (forked by that rank's fork server, or a
fresh interpreter with spares kept imported), their start, the process group over them,
the targets each has imported, and their replacement."""

from __future__ import annotations

import contextlib
import selectors
import time
from pathlib import Path

from chaoslight._schedule._errors import InvalidArgument
from chaoslight._world._forkserver import ForkServer
from chaoslight._world._pump import Lost, pump
from chaoslight._world._slot import (
    Slot,
    WorkersDidNotStart,
    no_answer,
    no_group,
    startup_failure,
)
from chaoslight._world._target import Target
from chaoslight._world._wire import Answer, Init, Inited, Resolve, Resolved, Store

INIT_TIMEOUT_S = 60.0


class Ranks:
    """``size`` ranks' workers and what the World knows of them.

    ``every`` (every worker not yet closed) and ``servers`` are the lists the World's
    finalizer kills: they are filled in place, never replaced."""

    def __init__(
        self,
        size: int,
        spares: int,
        python: str,
        env: dict[str, str],
        root: Path,
        start_timeout: float,
    ) -> None:
        self.size, self.spares_wanted = size, spares
        self.python, self.env, self.root = python, env, root
        self.start_timeout = start_timeout
        self.slots: list[Slot | None] = [None] * size
        self.spares: list[Slot] = []  # started and imported, waiting to replace a rank
        self.every: list[Slot] = []
        self.servers: list[ForkServer] = []  # one per rank, where workers are forked
        self.selector = selectors.DefaultSelector()
        self.group_ok = False
        self._gen = 0
        self._commands = 0
        self._spawned = 0

    def start_servers(self) -> None:
        """A fork server per rank (they import while the rest starts)."""
        for rank in range(self.size):
            log = self.root / f"server-{rank}.log"
            self.servers.append(ForkServer(rank, self.python, self.env, log, self.start_timeout))

    def next_command(self) -> int:
        """A number for the next command to the workers (their answers carry it)."""
        self._commands += 1
        return self._commands

    def live(self) -> list[Slot]:
        return [slot for slot in self.slots if slot is not None]

    # -- workers ----------------------------------------------------------------------
    def spawn_missing(self) -> None:
        """Give every rank a live worker: a spare if there is one, else a new process."""
        for rank, slot in enumerate(self.slots):
            if slot is not None and not slot.dead:
                continue
            if slot is not None:
                self.drop(slot)
            fresh = self._take_spare() or self._spawn(rank)
            fresh.rank = rank
            self.slots[rank] = fresh
            self.group_ok = False

    def renew(self) -> None:
        """A new worker for every rank, in a new process group."""
        for rank, slot in enumerate(self.slots):
            if slot is not None:
                self.drop(slot)
                self.slots[rank] = None
        self.group_ok = False
        self.spawn_missing()

    def _spawn(self, rank: int | None = None) -> Slot:
        """A new worker: forked by ``rank``'s server where there are servers."""
        self._spawned += 1
        log = self.root / f"worker-{self._spawned}.log"
        server = self.servers[rank] if self.servers and rank is not None else None
        slot = Slot(self.python, self.env, log, server)
        self.selector.register(slot.msgs, selectors.EVENT_READ, slot)
        self.every.append(slot)
        return slot

    def _take_spare(self) -> Slot | None:
        self._drop_dead_spares()
        if not self.spares:
            return None
        spare = next((s for s in self.spares if s.ready), self.spares[0])
        self.spares.remove(spare)
        return spare

    def _drop_dead_spares(self) -> None:
        for spare in [s for s in self.spares if s.dead]:
            self.spares.remove(spare)
            self.drop(spare)

    def _top_up_spares(self) -> None:
        self._drop_dead_spares()
        # A forked worker is up in milliseconds: no spare is kept waiting where ranks fork.
        while len(self.spares) < (0 if self.servers else self.spares_wanted):
            self.spares.append(self._spawn())

    def drop(self, slot: Slot) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(slot.msgs)
        slot.close()
        if slot in self.every:
            self.every.remove(slot)

    def abandon(self) -> None:
        """Kill every rank's worker: their state is unknown (e.g. Ctrl-C mid-example).

        A worker that is not ready has been sent nothing, and one its fork server has not
        forked yet (the server still imports) does not even exist: it is kept, not waited
        for. Waiting for its pid here made a Ctrl-C during the World's start take as long
        as the imports (10-15 s on a busy machine). A ready one's pid is known or on its way."""
        for slot in self.live():
            if slot.ready or slot.started:
                slot.kill()
        self.group_ok = False

    # -- readiness and the process group ----------------------------------------------
    def prepare(self, timeout: float) -> None:
        """Every rank up, in one process group whose timeout suits ``timeout``."""
        self.spawn_missing()
        self.await_ready(self.live())
        if not self.group_ok:
            self._init_group(timeout)
        self._top_up_spares()  # after the ranks, so they start as fast as they can

    def await_ready(self, slots: list[Slot]) -> None:
        deadline = time.monotonic() + self.start_timeout
        while not all(slot.ready for slot in slots):
            if time.monotonic() > deadline:
                raise WorkersDidNotStart(f"World workers did not start in {self.start_timeout:g} s")
            for slot, msg in pump(self.selector, min(deadline, time.monotonic() + 1.0)):
                if msg is None and slot in slots:
                    raise startup_failure(slot)

    def _init_group(self, timeout: float) -> None:
        for attempt in range(2):
            try:
                self._try_init(timeout)
                return
            except Lost as lost:
                if attempt:
                    raise startup_failure(lost.slot) from None
                self.abandon()  # the others may wait in the rendezvous: start afresh
                self.spawn_missing()
                self.await_ready(self.live())

    def _try_init(self, timeout: float) -> None:
        self._gen += 1
        gen, slots = self._gen, self.live()
        deadline = time.monotonic() + INIT_TIMEOUT_S
        slots[0].send(Init(0, self.size, gen, port=0, timeout=timeout))
        # Rank 0 answers twice, the store's port then Inited: with no peer to wait for (a
        # World of one) both can come in one read, and the second must not be lost.
        later: dict[int, Answer] = {}
        first = self._replies(slots[:1], (Store, Inited), gen, deadline, later)[0]
        if isinstance(first, Inited):  # rank 0 could not even host the store
            raise no_group(first.error)
        port = first.port if isinstance(first, Store) else 0
        for slot in slots[1:]:
            slot.send(Init(slot.rank, self.size, gen, port, timeout))
        waiting = [slot for slot in slots if slot.rank not in later]
        for reply in [*later.values(), *self._replies(waiting, (Inited,), gen, deadline).values()]:
            if isinstance(reply, Inited) and reply.error is not None:
                raise no_group(reply.error)
        self.group_ok = True

    def _replies(
        self,
        slots: list[Slot],
        kinds: tuple[type[Answer], ...],
        number: int,
        deadline: float,
        later: dict[int, Answer] | None = None,
    ) -> dict[int, Answer]:
        """Each of ``slots``' first answer (one of ``kinds``) to command ``number``, by rank;
        a second answer read in the same pass goes to ``later`` (dropped without it)."""
        got: dict[int, Answer] = {}
        while len(got) < len(slots):
            if time.monotonic() > deadline:
                missing = sorted({s.rank for s in slots} - set(got))
                raise no_answer(missing, kinds[-1].OP)
            for slot, msg in pump(self.selector, min(deadline, time.monotonic() + 1.0)):
                if slot not in slots:
                    continue
                if msg is None:
                    raise Lost(slot)
                if isinstance(msg, kinds) and msg.answers == number:
                    if slot.rank not in got:
                        got[slot.rank] = msg
                    elif later is not None:
                        later[slot.rank] = msg
        return dict(sorted(got.items()))

    def resolve(self, spec: Target) -> None:
        """Have every rank import the target before it runs (once per worker): a bad
        target fails here, and the watchdog's clock never counts an import."""
        slots = [slot for slot in self.live() if spec not in slot.resolved]
        if not slots:
            return
        number = self.next_command()
        for slot in slots:
            slot.send(Resolve(number, spec))
        deadline = time.monotonic() + self.start_timeout
        try:
            replies = self._replies(slots, (Resolved,), number, deadline)
        except Lost as lost:
            raise startup_failure(lost.slot) from None
        for reply in replies.values():
            if isinstance(reply, Resolved) and reply.error is not None:
                raise InvalidArgument(reply.error)
        for slot in slots:
            slot.resolved.add(spec)
