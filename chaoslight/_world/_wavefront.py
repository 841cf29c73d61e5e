"""Hangs seen at the wavefront: every live rank blocked, in collectives that cannot meet.

A hang the ranks' own watchdogs find costs the full timeout. Many hangs are decided long
before: rank 0 blocked in its collective #8, a barrier, while rank 1 is blocked in its
#8, a broadcast, or has already returned. Nothing can ever release either of them.

Worker side, ``Tracker.look()`` (the watchdog thread, every ``TICK_S``) says whether the
main thread is **blocked in a collective**: the innermost site in progress
(``engine.in_progress``) is a ``dist.*`` collective, the innermost Python frame is
torch.distributed's own code (waiting on gloo: not sleeping in a ``Delay`` fault in
chaoslight's engine, not running user code), the process is **asleep** (``_sched``: the
main thread sleeps, no thread ran or waited for a CPU half the time since the last look;
the frames are still needed: a main thread that wants the GIL the watchdog holds sleeps
too), and the job has only the World's process group (a subgroup's collectives need not
line up). Its **sequence number** counts every ``dist.*`` collective call the engine saw
on this rank (DDP's gradient all-reduce excluded: observed only when a schedule names
it), so the ranks of a correct program agree on it. A main thread still inside autograd
(``backward``, ``manual_backward``) in an asleep process waits in DDP's gradient
all-reduce: reported as blocked there (``dist.gradient_allreduce``, same number), so a
peer blocked in another collective is a hang decided at once. A backward that computes
is never asleep: its threads (the main one, torch's intra-op ones) run or wait for a CPU.

**Load changes neither verdict, by construction.** A starved rank's threads are runnable,
running or on a run queue, never asleep: a loaded machine slows a correct rank but never
makes it look blocked (a CPU share, which starving lowers, does not decide). A rank
blocked in gloo sleeps, and a sleeping thread accrues neither CPU nor run-queue wait
whatever the load (gloo's loop thread wakes every 10 ms for microseconds, each wake-up
waiting about one time slice: far below half a window). So the hung ranks' looks read as
on an idle machine, from the first one (no earlier reading is needed), and the decision
comes ``BLOCKED_S`` + ``CONFIRM_S`` + a few ``TICK_S`` after the hang (about 1 s), late
only by the watchdog's and the parent's wake-ups (milliseconds: a waking sleeper is
scheduled first). Where ``/proc`` cannot be read no rank is blocked: the timeout decides.
``_sockets.GlooSockets`` can release a blocked rank without killing it: it shuts down the
process group's TCP connections, and gloo raises "Connection closed by peer" in every rank
that waits on them.

Parent side, ``HangDecider.decide()`` (each wake-up of ``Example.collect``) declares a hang
when every pending rank has been blocked for ``BLOCKED_S`` (fresh reports) and either
their (collective, sequence number) differ, or some rank has ended (returned, raised or
died) ``END_GRACE_S`` before (gloo releases the peers of a rank that fails or dies by
itself), and the same picture holds ``CONFIRM_S`` later. Ranks waiting together in the
same collective with the same number wait for a straggler: never a hang.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from chaoslight._runtime._frames import current_frames, is_library, past_op_dispatch
from chaoslight._runtime._stacks import active_engine
from chaoslight._runtime._trace import COLLECTIVE_SITES
from chaoslight._sites._async_work import in_async_wait
from chaoslight._world._sched import Reading, asleep, read_threads

GRADIENT_ALLREDUCE = "dist.gradient_allreduce"  # not in COLLECTIVE_SITES (see above)
# A collective DDP issues by itself outside autograd (its buffer broadcast or bucket rebuild
# in ``forward``, its parameter-shape check when built), or any wait in torch.distributed
# while no site is in progress (an asynchronous collective's ``work.wait()``): no site sees
# it, so its number says nothing and two ranks in it are in the same one. Waiting in it
# decides a hang only beside a rank frozen for good, or beside a rank waiting in a
# collective a site saw.
DDP_INTERNAL = "dist.ddp_internal"

TICK_S = 0.1  # how often a worker looks at its main thread
REPORT_AFTER_S = 0.3  # a worker reports a collective it has been blocked in this long
FRONT_EVERY_S = 0.25  # and keeps reporting it this often while blocked
BLOCKED_S = 0.5  # the parent decides only on ranks blocked at least this long
FRESH_S = 0.75  # on reports no older than this
CONFIRM_S = 0.3  # and when the same picture holds this much later, freshly reported
END_GRACE_S = 1.0  # after a rank ended: time for gloo to release its peers by itself

# In the evidence of a rank hung where it waits for its peers in torch.distributed (a
# collective, the store), which the process group's timeout would end: the oracle tells a
# wait any correct program makes while a peer is frozen from one with no deadline by it.
BOUNDED_WAIT = "a wait in torch.distributed, which the process group's timeout bounds"

# Packages whose frames are skipped when naming who called a collective.
_PLUMBING = ("torch.distributed", "chaoslight", "wrapt")


@dataclass(frozen=True)
class Front:
    """Where one rank is blocked: a collective, its sequence number, for how long."""

    site: str
    seq: int  # this rank's collective calls so far, this one included
    call: int  # this site's call number on this rank (as the watchdog names it)
    step: int | None
    blocked_s: float
    caller: str = ""  # "_broadcast_sigterm_tensor at training_epoch_loop.py:265"
    by_program: bool = False  # issued by the program's own code, not Lightning's loops
    # Sent once, just before a freeze fault stops the rank (``site`` is where it fired):
    # the silence that follows is the fault's. ``frozen_for``: its seconds, None for good.
    frozen: bool = False
    frozen_for: float | None = None

    def describe(self) -> str:
        """``collective #9, dist.broadcast from _broadcast_sigterm_tensor at loop.py:265``."""
        if self.frozen:
            return f"frozen at {self.frozen_at()}"
        caller = f" from {self.caller}" if self.caller else ""
        return f"collective #{self.seq}, {self.site}{caller}"

    def frozen_at(self) -> str:
        """Where a freeze stopped the rank: ``lightning.training_step #3 at step 2``."""
        return f"{self.site} #{self.call}" + ("" if self.step is None else f" at step {self.step}")

    @property
    def frozen_for_good(self) -> bool:
        """A freeze that never ends by itself: the rank will never join a collective again."""
        return self.frozen and self.frozen_for is None


# -- the worker's side ----------------------------------------------------------------------
def _folder(module: str) -> str:
    found = sys.modules.get(module)
    path = getattr(found, "__file__", None)
    return os.path.dirname(os.path.abspath(path)) + os.sep if path else "\0"


def _in_distributed(filename: str) -> bool:
    """A frame of torch.distributed's own code, or chaoslight's marking wrapper around
    ``Work.wait`` (``_sites/_async_work``: torch's collectives wait through it, and an
    asynchronous collective's ``work.wait()`` has no other Python frame)."""
    return filename.startswith(_folder("torch.distributed")) or in_async_wait(filename)


class Tracker:
    """Whether the main thread is blocked in a collective, and since when (see the module).

    ``decidable()`` says whether sequence numbers mean anything now (only the World's
    process group exists); ``look()`` is called from one thread (the watchdog's).
    """

    def __init__(
        self,
        decidable: Callable[[], bool],
        read: Callable[[int], dict[int, Reading] | None] = read_threads,
    ) -> None:
        self.decidable = decidable
        self.read = read  # the process's threads but the caller's (``_sched.read_threads``)
        self.main = threading.main_thread().ident or 0
        self.main_tid = threading.main_thread().native_id or 0
        self.reset()

    def reset(self) -> None:
        """Forget what was seen (a new example)."""
        self.key: tuple[str, int, int, int | None] | None = None
        self.since = self.at = time.monotonic()
        self.threads: dict[int, Reading] = {}  # read at ``at``, in a collective
        self.caller = ""
        self.by_program = False

    def look(self) -> Front | None:
        """The collective the main thread is blocked in now, or None. Never raises: it runs
        in the watchdog's thread, which must outlive anything a target does."""
        try:
            return self._look()
        except Exception:
            self.key = None
            return None

    def _look(self) -> Front | None:
        now = time.monotonic()
        frame = current_frames().get(self.main)
        key = self._key(frame)
        if key is None:
            self.threads = {}  # not in a collective: the next window starts afresh
        elif not self._asleep(now):
            key = None
        if key is None or key != self.key:
            self.key, self.since, self.caller = key, now, ""
            return None
        if not self.caller:
            self.caller, self.by_program = caller_of(frame), issued_by_program(frame)
        site, seq, call, step = key
        return Front(site, seq, call, step, now - self.since, self.caller, self.by_program)

    def _asleep(self, now: float) -> bool:
        """Whether the process sleeps since the last look (``_sched``); never without /proc."""
        threads = self.read(threading.get_native_id())
        before, window = self.threads, max(now - self.at, 1e-3)
        self.threads, self.at = threads or {}, now
        return threads is not None and asleep(before, threads, self.main_tid, window)

    def _key(self, frame: FrameType | None) -> tuple[str, int, int, int | None] | None:
        found = self._waiting_in(frame)
        if found is None or not self.decidable():
            return None
        site, call, step = found
        return site, _sequence(), call, step

    def _waiting_in(self, frame: FrameType | None) -> tuple[str, int, int | None] | None:
        """The collective the main thread (innermost ``frame``) is in, if it waits in one."""
        engine = active_engine()
        if engine is None or frame is None:
            return None
        stack = engine.in_progress_of(self.main)
        frame = past_op_dispatch(frame)
        if frame is None:
            return None
        # Outside every site in progress (a loop's calls pass through the sites the schedule
        # cannot fire at, as DDP's own collectives in Fabric's setup and forward do): a
        # wait in torch.distributed is still one, a collective no site saw.
        site, call, step = stack[-1] if stack else ("", 0, engine.step())
        where = frame.f_code.co_filename
        if where.startswith(_folder("torch.autograd")):
            # Still in autograd (``backward``, or ``manual_backward`` in a training step),
            # and asleep (``_look``): DDP's gradient all-reduce waits for its peers. A CPU
            # backward that computes runs on this thread and on torch's intra-op threads,
            # all of them running or runnable, never asleep.
            site = GRADIENT_ALLREDUCE
        elif site not in COLLECTIVE_SITES:
            if not (where.startswith(_folder("torch.nn.parallel")) or _in_distributed(where)):
                return None  # not in a collective
            site = DDP_INTERNAL  # in one that DDP (or a library) issued where no site sees it
        elif not _in_distributed(where):
            return None  # in a collective's site but not waiting in it (a Delay sleeps)
        return site, call, step

    def in_collective(self) -> bool:
        """Whether the main thread waits in torch.distributed now (a collective of any
        group, DDP's gradient all-reduce, the store): a wait the process group's (or the
        store's) timeout bounds. For a hang report; never raises."""
        try:
            frame = current_frames().get(self.main)
            caller = past_op_dispatch(frame)
            inside = caller is not None and _in_distributed(caller.f_code.co_filename)
            return inside or self._waiting_in(frame) is not None
        except Exception:
            return False

    def frozen(self, seconds: float | None) -> Front:
        """What a rank reports just before a freeze stops it, at the site it fired at."""
        engine = active_engine()
        stack = engine.in_progress_of(self.main) if engine is not None else []
        site, call, step = stack[-1] if stack else ("", 0, None)
        return Front(site, _sequence(), call, step, 0.0, frozen=True, frozen_for=seconds)


def _sequence() -> int:
    """This rank's collective calls so far (the active engine's count)."""
    engine = active_engine()
    return sum(engine.counts().calls.get(name, 0) for name in COLLECTIVE_SITES) if engine else 0


def only_group(group: Any) -> bool:
    """Whether collective sequence numbers line up across ranks: ``group`` (the World's) is
    the default process group and no other exists (a subgroup counts its own)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    try:
        groups = distributed_c10d._world.pg_map
        return dist.is_initialized() and dist.group.WORLD is group and len(groups) == 1
    except AttributeError:  # another torch: no early hangs, the timeout still holds
        return False


def caller_of(frame: FrameType | None) -> str:
    """The innermost frame outside torch.distributed and chaoslight's plumbing, as
    ``function at file.py:line``: who called the collective."""
    skip = tuple(_folder(name) for name in _PLUMBING)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith("<") and not filename.startswith(skip):
            return f"{frame.f_code.co_name} at {Path(filename).name}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


def issued_by_program(frame: FrameType | None) -> bool:
    """Whether the program's own code issued the collective: going outwards from it, a
    frame of the user's comes before any of Lightning's loops (a hook or step that calls
    ``save_checkpoint``, ``self.log(sync_dist=True)`` or ``dist.barrier``), rather than a
    loop's own per-batch collective. Of ranks hung in different collectives, the one in
    the program's is the likely cause."""
    loops = tuple(
        _folder(f"{flavour}.loops") for flavour in ("lightning.pytorch", "pytorch_lightning")
    )
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(loops):
            return False
        if not is_library(filename):
            return True
        frame = frame.f_back
    return False


# -- the parent's side ----------------------------------------------------------------------
@dataclass(frozen=True)
class RankState:
    """What the parent knows of one rank, for ``HangDecider.decide``."""

    rank: int
    pending: bool
    front: Front | None = None
    front_at: float = 0.0  # when that report arrived (monotonic)
    ended_at: float | None = None  # when its result came or its pipe closed (monotonic)
    how: str = ""  # how it ended: "returned", "raised", "died"


class HangDecider:
    """Decides, from the ranks' reports, that an example is hung (see the module)."""

    def __init__(self) -> None:
        self.suspect: tuple[Any, ...] | None = None
        self.suspect_at = 0.0

    def watching(self, seen: list[RankState]) -> bool:
        """Whether some pending rank reports a collective (the parent should look often)."""
        return any(s.pending and s.front is not None for s in seen)

    def decide(self, now: float, seen: list[RankState]) -> HangDecision | None:
        """The evidence that the example is hung, or None."""
        pending = [s for s in seen if s.pending]
        ended = [s for s in seen if not s.pending and s.ended_at is not None]
        fronts = {s.rank: s.front for s in pending if s.front is not None}
        # A rank frozen for good will never join a collective: whoever waits for it waits
        # for nothing, whatever their collectives (the process group's timeout would end
        # them; an injected freeze's verdict needs no more).
        frozen = [s for s in pending if s.front is not None and s.front.frozen_for_good]
        waiting = [s for s in pending if s not in frozen]
        beside = bool(frozen) or any(f.site != DDP_INTERNAL for f in fronts.values())
        if not pending or not all(blocked(s, now, beside) for s in waiting):
            self.suspect = None
            return None
        if ended:
            last = max(s.ended_at or 0.0 for s in ended)
            if any(s.front_at < last + END_GRACE_S for s in waiting):
                return None  # gloo may still release them
        elif frozen:
            pass
        elif len({where(f) for f in fronts.values()}) < 2:
            self.suspect = None  # one collective, one number: waiting for a straggler
            return None
        picture = (
            tuple(sorted((rank, f.site, f.seq) for rank, f in fronts.items())),
            tuple(sorted(s.rank for s in ended)),
        )
        if picture != self.suspect:
            self.suspect, self.suspect_at = picture, now
            return None
        if now - self.suspect_at < CONFIRM_S or any(s.front_at <= self.suspect_at for s in waiting):
            return None
        gone = {s.rank: s.how for s in ended}
        return HangDecision(dict(sorted(fronts.items())), dict(sorted(gone.items())))


def where(front: Front) -> tuple[str, int]:
    """The collective a rank waits in: its site and number (none for one no site saw)."""
    return front.site, -1 if front.site == DDP_INTERNAL else front.seq


def blocked(seen: RankState, now: float, unseen_counts: bool = False) -> bool:
    """The rank reported, recently, a collective it has been blocked in for ``BLOCKED_S``
    (one no site saw only where ``unseen_counts``: see ``DDP_INTERNAL``)."""
    front = seen.front
    return (
        front is not None
        and front.blocked_s >= BLOCKED_S
        and now - seen.front_at <= FRESH_S
        and (front.site != DDP_INTERNAL or unseen_counts)
    )


@dataclass(frozen=True)
class HangDecision:
    """Why an example is hung: where each pending rank is blocked, how the others ended."""

    fronts: dict[int, Front]
    ended: dict[int, str]  # rank → "returned", "raised", "died"

    def why(self, rank: int) -> str:
        """What rank ``rank``'s evidence adds to its position: ``blocked 1.2 s in collective
        #8, dist.barrier from _export at t.py:12; rank 1 is in collective #8, dist.broadcast
        from _broadcast_sigterm_tensor at training_epoch_loop.py:265``."""
        own = self.fronts[rank]
        if own.frozen:
            return f"frozen for good at {own.frozen_at()} (a freeze fault): it will not run again"
        text = f"blocked {own.blocked_s:.1f} s in {own.describe()}"
        frozen = [r for r, f in self.fronts.items() if f.frozen]
        others = [f"rank {r} is in {f.describe()}" for r, f in self.fronts.items() if r != rank]
        if frozen:
            names = " and ".join(f"rank {r}" for r in frozen)
            return f"{text}, which {names}, frozen for good, will never join ({BOUNDED_WAIT})"
        if not self.ended:
            return f"{text}; " + ", ".join(others) + ": the collectives differ"
        gone = ", ".join(f"rank {r} {how}" for r, how in self.ended.items())
        also = "".join(f"; {other}" for other in others)
        return f"{text}, which no rank that ended will join ({gone}){also}"


def waits_boundedly(evidence: str) -> bool:
    """Whether a hung rank's evidence says it waited in torch.distributed (``BOUNDED_WAIT``)."""
    return BOUNDED_WAIT in evidence
