"""The fault space a search draws from: the (site, step) points a run really reaches.

A campaign's fault-free baseline run records, per rank, every site reached with the
steps it ran at, and which hooks the user's own classes implement (``_checks/_reach.py``).
``Reach`` turns that into points; ``Space`` draws triggers from them, with weight on the
user's code, so the search spends its examples where faults can fire and where the user's
code runs, over the whole run (the last step of each epoch, the hooks between epochs),
not over a fixed few steps at ~70 sites most of which a program never reaches.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hypothesis import strategies as st

from chaoslight._checks._base import CANNOT_JUDGE
from chaoslight._runtime import OBSERVATION
from chaoslight._schedule import (
    FAULT_KINDS,
    LIGHTNING_STEPS,
    OFF_COLLECTIVES,
    OOM,
    REDUCTION,
    SITES,
    Delay,
    Fault,
    Flip,
    InvalidArgument,
    PgAbort,
    Preempt,
    Raise,
    Schedule,
)
from chaoslight._search._caught import PLAIN_ERRORS, CallFrame, Caught, caught_errors

# OFF_COLLECTIVES: an error raised *by* a collective: Lightning 2.5-2.6 swallows one from
# its per-batch SIGTERM broadcast and the ranks desync, so every correct program would
# "hang" (a framework bug, reported apart in a later version). Raised errors and OOMs are
# drawn everywhere else (their ``drawn_at``); stragglers, reorders and crashes at
# collectives too.
USER_WEIGHT = 3  # a point in the user's own code is drawn this many times as often
PROBE_SECONDS = 1.0  # a straggler long enough to beat the natural margins between ranks
MAX_PROBES = 32
MAX_FREEZE_PROBES = 4  # a freeze for good costs a hang decision and a new rank: ~4 s
MAX_SAVE_CRASHES = 2  # crash-in-save-then-restart probes: each is two whole runs
MAX_CAUGHT_PROBES = 4  # a caught error at its site's first step: the one-rank skip
PER_BATCH = (
    *("_batch_start", "_batch_end", "_step", "backward", "forward", "zero_grad", "next_batch"),
    # A loop's own collectives run every step, and a straggler waits in them harmlessly.
    *("barrier", "all_reduce", "all_gather", "broadcast"),
)
CORE = frozenset(
    {f"lightning.{name}" for name in LIGHTNING_STEPS}
    | {"lightning.forward", "lightning.backward", "lightning.optimizer_step"}
    # Calls, not hooks: the batch a rank reads and the checkpoint it loads (the data and
    # checkpoint faults fire only there).
    | {"lightning.next_batch", "lightning.load_checkpoint"}
)
Point = tuple[str, "int | None"]  # (site, step); a None step means "whenever it is reached"
# Where a training step's work runs, a Trainer's first: a loop the program writes itself
# (Fabric, plain PyTorch) has no training_step, and its backward is where each step's
# work is sure to run (``_runtime/_loop_steps.py``).
TRAINING_STEP_SITES = ("lightning.training_step", "torch.backward")
# Where an OOM handler's try sits: the model's forward, else the step around it.
FORWARD_SITES = ("lightning.forward", "lightning.training_step", "fabric.forward", "torch.backward")
# Where a step's loss is yet to be computed: a plain loop's forward is no site, its batch's
# fetch is (the backward comes after the loss).
BEFORE_LOSS_SITES = (*FORWARD_SITES[:3], "torch.next_batch")


@dataclass(frozen=True)
class Reach:
    """The points a baseline run reached on any rank, and the sites in the user's code."""

    points: tuple[Point, ...] = ()
    user: frozenset[str] = frozenset()
    # (site, exception, args): an error the program's handlers catch around that site
    # (``_search/_caught.py``), and why a handler or class there was left out.
    caught: tuple[Caught, ...] = ()
    notes: tuple[str, ...] = ()
    loop: bool = False  # the run was a loop no Trainer ran (Fabric, plain PyTorch)
    # (check, why): the checks that said in that run they cannot judge this program
    unjudged: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_outcome(cls, outcome: Any) -> Reach | None:
        """The reach recorded in an outcome's observations, or None when none was."""
        seen: set[Point] = set()
        user: set[str] = set()
        paths: dict[str, list[list[CallFrame]]] = {}
        modules: dict[str, Any] = {}
        found = loop = False
        unjudged: dict[str, str] = {}
        for event in outcome.events:
            if event.kind != OBSERVATION:
                continue
            if CANNOT_JUDGE in event.detail and event.site != "reach":
                why = _facts(event).get(CANNOT_JUDGE)
                if isinstance(why, str):
                    unjudged.setdefault(event.site, why)
                continue
            if event.site != "reach":
                continue
            found = True
            facts = _facts(event)
            loop = loop or facts.get("loop") is True
            user.update(facts.get("user", ()))
            for site, steps in facts.get("steps", {}).items():
                seen.update((site, step) for step in steps if site in SITES)
            for site, recorded in facts.get("paths", {}).items():
                known = paths.setdefault(site, []) if site in SITES else []
                known += [p for p in map(_frames, recorded) if p and p not in known]
            modules.update(facts.get("modules", {}))
        if not found:
            return None
        caught, notes = caught_errors(paths, modules)
        points = tuple(sorted(_with_gradient_sync(seen), key=_order))
        return cls(points, frozenset(user), caught, notes, loop, tuple(sorted(unjudged.items())))

    def shard(self, index: int, count: int) -> Reach:
        """This worker's share of the points: disjoint across ``index`` 0..count-1."""
        if not (isinstance(count, int) and count >= 1 and 0 <= index < count):
            raise InvalidArgument(f"shard={index}/{count} must be i/N with 0 <= i < N")
        mine = tuple(p for p in self.points if _bucket(p, count) == index)
        return replace(self, points=mine)

    def restricted(self, sites: Iterable[str]) -> Reach:
        allowed = set(sites)
        return replace(self, points=tuple(p for p in self.points if p[0] in allowed))

    def focused(self) -> Reach:
        """Only the points where a fault means something different: the user's own hooks,
        the steps, forward, backward and optimizer step, and torch's calls (collectives,
        save/load, synchronize). A Lightning hook the user does not implement does nothing,
        so a fault there is the same as one at the call next to it."""
        keep = tuple(p for p in self.points if _meaningful(p[0], self.user))
        return replace(self, points=keep) if keep else self

    def probes(self, world_size: int, kinds: Iterable[str]) -> list[Schedule]:
        """Single faults at the rare points where bugs hide, each on each rank, tried before
        the random search (which seldom lands on a point reached once an epoch):

        - a long straggler at each step of each user hook that is not per batch — the
          races between hooks (a file rank 0 writes at an epoch's end, read by a peer at the
          next epoch's start);
        - a slow write (the same straggler) at the first ``torch.save``, a full disk
          (``OSError(28)``) at each ``torch.save``/``torch.load``: a peer that reads what a
          rank writes without waiting for it, a write that fails;
        - an OOM in the forward (or the training step) at the first step, on each rank and
          then on every rank at once (the same batch runs out everywhere): the OOM handlers
          that recover on one rank only, or only when one rank does;
        - a crash inside each ``torch.save``, then a restart: a write that truncates the
          last good file breaks the restarted job;
        - SIGTERM to the last rank alone at the first training step: one node of a job
          preempted, which a job must stop together (Lightning's own handling does not);
          then to every rank's process group there, as a scheduler preempts a whole job:
          an emergency save that needs its DataLoader workers loses them;
        - the process group aborted under rank 0 at the first reduction of a training step:
          a retry, or a fallback to the rank's own value, that goes on alone;
        - each error the program catches around a site (``caught``), on the last rank at
          that site's first step: a handler that skips or recovers on one rank alone;
        - a crash at the step after the first checkpoint, then a restart (state the
          checkpoint lost), and the same with the restart's checkpoint read failing on the
          last rank: a resume that falls back alone;
        - a rank frozen for good at the first step of each user hook that is not per batch:
          a peer waiting for it with no deadline outside a collective;
        - a bit flipped on rank 0 before the loss of the second step, so that its loss alone
          is infinite: a collective called, or skipped, on the condition of a rank's own
          loss.
        """
        found = [Schedule([oom]) for oom in self._oom_probes(world_size, kinds)]
        found += [Schedule([fault]) for fault in self._caught_probes(world_size, kinds)]
        found += [Schedule([fault]) for fault in self._preempt_probes(world_size, kinds)]
        found += [Schedule([fault]) for fault in self._abort_probes(world_size, kinds)]
        found += self._crash_in_save_probes(world_size, kinds)
        found += self._resume_probes(world_size, kinds)
        found += [Schedule([fault]) for fault in self._freeze_probes(world_size, kinds)]
        found += [Schedule([flip]) for flip in self._flip_probes(kinds)]
        saves = [point for point in self.points if point[0] == "torch.save"]
        first_save = saves[0] if saves else None  # one slow write per rank: each costs 1 s
        for site, step in self.points:
            for rank in range(world_size):
                slow = (site, step) == first_save
                faults = _probes_at(site, rank, step, self.user, set(kinds), slow)
                found += [Schedule([fault]) for fault in faults]
        return found[:MAX_PROBES]

    def _crash_in_save_probes(self, world_size: int, kinds: Iterable[str]) -> list[Schedule]:
        """Each kind that aborts the call and ends the process (a crash) inside each
        ``torch.save``, then a restart: the write is left half done."""
        ending = [FAULT_KINDS[k] for k in kinds if k in FAULT_KINDS]
        ending = [cls for cls in ending if cls.kills_process and cls.aborts_call]
        return [
            Schedule([cls(site=site, rank=rank, step=step)], restarts=1)
            for cls in ending
            for site, step in self.points
            if site == "torch.save"
            for rank in range(world_size)
        ][:MAX_SAVE_CRASHES]

    def _resume_probes(self, world_size: int, kinds: Iterable[str]) -> list[Schedule]:
        """A crash at the step after the first checkpoint, then a restart: the resumed job
        must train as the uninterrupted one would (state the checkpoint lost); and the same
        with the restarted job's checkpoint read failing on the last rank (a full disk at
        ``torch.load``): a resume that falls back on one rank alone desyncs the job."""
        ending = [FAULT_KINDS[k] for k in kinds if k in FAULT_KINDS]
        ending = [cls for cls in ending if cls.kills_process and cls.aborts_call]
        step_site, steps = self._first_with_steps(TRAINING_STEP_SITES)
        saved = sorted(s for site, s in self.points if site == "torch.save" and s is not None)
        if not ending or Raise.kind not in kinds or world_size < 2 or not saved:
            return []
        after = [step for step in steps if step > saved[0]]
        if not after:
            return []
        crash = ending[0](site=step_site, rank=0, step=after[0])
        full = Raise("OSError", (28, "No space left on device"), site="torch.load")
        load = replace(full, rank=world_size - 1, times=1, run=2)
        return [Schedule([crash], restarts=1), Schedule([crash, load], restarts=1)]

    def _freeze_probes(self, world_size: int, kinds: Iterable[str]) -> list[Fault]:
        """A rank stopped for good at the first step of each user hook that is not per
        batch, each rank in turn: a peer that waits for what it was to write (a flag file
        polled with no deadline) waits forever, where a collective's timeout would end it."""
        stalling = [FAULT_KINDS[k] for k in kinds if k in FAULT_KINDS and FAULT_KINDS[k].stalls]
        if world_size < 2 or not stalling:
            return []
        first: dict[str, int | None] = {}
        for site, step in self.points:
            if site in self.user and not site.endswith(PER_BATCH):
                first.setdefault(site, step)
        return [
            cls(site=site, rank=rank, step=step)
            for cls in stalling
            for site, step in first.items()
            for rank in range(world_size)
        ][:MAX_FREEZE_PROBES]

    def _caught_probes(self, world_size: int, kinds: Iterable[str]) -> list[Raise]:
        if Raise.kind not in kinds:
            return []
        first: dict[str, int | None] = {}
        for site, step in self.points:
            first.setdefault(site, step)  # points are in step order
        return [
            Raise(name, args, site=site, rank=world_size - 1, step=first[site])
            for site, name, args in self.caught
            if site in first and not site.startswith("dist.")
        ][:MAX_CAUGHT_PROBES]

    def _preempt_probes(self, world_size: int, kinds: Iterable[str]) -> list[Fault]:
        """SIGTERM at the first training step: to the last rank alone (one node of the job
        preempted), then to every rank's whole process group, as a scheduler preempts a
        job (the DataLoader workers get it too, before an emergency save that reads from
        them)."""
        site, steps = self._first_with_steps(TRAINING_STEP_SITES)
        if Preempt.kind not in kinds or world_size < 2 or not steps:
            return []
        return [
            Preempt(site=site, rank=world_size - 1, step=steps[0]),
            Preempt(site=site, step=steps[0], group=True),
        ]

    def _abort_probes(self, world_size: int, kinds: Iterable[str]) -> list[Fault]:
        """The process group aborted under rank 0 at the first reduction of a training
        step (the program's own reductions run there; those before the first step are
        Lightning's setup): a program that retries the collective, or falls back to the
        rank's own value, goes on alone instead of failing."""
        if PgAbort.kind not in kinds or world_size < 2:
            return []
        for site, step in self.points:  # points are in step order
            if step is not None and REDUCTION in SITES[site].capabilities:
                return [PgAbort(site=site, rank=0, step=step)]
        return []

    def _oom_probes(self, world_size: int, kinds: Iterable[str]) -> list[Fault]:
        if OOM.kind not in kinds:
            return []
        site, steps = self._first_with_steps(FORWARD_SITES)
        if not steps:
            return []
        ranks: list[int | None] = [*range(world_size), None]  # None: every rank at once
        # The earliest step: what the shrinker would reach anyway.
        return [OOM(site=site, rank=rank, step=steps[0]) for rank in ranks]

    def _flip_probes(self, kinds: Iterable[str]) -> list[Fault]:
        """A flaky GPU on rank 0 before the loss of the second training step (the first
        whose parameters an optimizer step made; in a plain loop, at its batch's fetch):
        the exponent bit of the first element of
        the first parameter, which makes a weight below 1 in magnitude about 2**128 times
        larger, so that rank's loss alone goes to infinity. A program that branches on its
        own loss (a spike monitor that all-reduces only then, a skip of a non-finite batch)
        calls or skips a collective on that rank alone."""
        site, steps = self._first_with_steps(BEFORE_LOSS_SITES)
        if Flip.kind not in kinds or len(steps) < 2:
            return []
        return [Flip(site=site, rank=0, step=steps[1])]

    def _first_with_steps(self, sites: Sequence[str]) -> tuple[str, list[int]]:
        """The first of ``sites`` reached at some step, with its steps in order."""
        for site in sites:
            steps = sorted(step for name, step in self.points if name == site and step is not None)
            if steps:
                return site, steps
        return sites[0], []


@dataclass(frozen=True)
class Space:
    """Where faults may go: ranks, sites, and steps (a fixed range, or a run's reach)."""

    world_size: int
    sites: Sequence[str]
    steps: int
    reach: Reach | None = field(default=None)

    def able(self, capability: str | None) -> list[str]:
        """The sites that can take a kind needing ``capability`` (and, with a reach, that
        the run reached). ``OFF_COLLECTIVES`` means any site but a collective."""
        if capability == OFF_COLLECTIVES:
            able = [s for s in self.sites if not s.startswith("dist.")]
        else:
            able = [
                s for s in self.sites if capability is None or capability in SITES[s].capabilities
            ]
        if self.reach is not None:
            reached = {site for site, _ in self.reach.points}
            able = [s for s in able if s in reached]
        return able

    def can_take(self, capability: str | None) -> bool:
        return bool(self.able(capability))

    def triggers(self, capability: str | None) -> st.SearchStrategy[dict[str, Any]]:
        """``site``/``rank``/``step`` for a kind that needs ``capability`` (None: any site).

        Shrinks to rank 0, the earliest step and the first site.
        """
        able = self.able(capability)
        if not able:
            raise InvalidArgument(
                f"no site in sites={tuple(self.sites)!r} can take a fault needing {capability}"
            )
        ranks = st.integers(0, self.world_size - 1)
        if self.reach is None:
            steps = st.integers(0, self.steps - 1)
            return st.fixed_dictionaries(
                {"site": st.sampled_from(able), "rank": ranks, "step": steps}
            )
        # The site first, then one of its steps: a site reached at two steps (a save at
        # each epoch's end) is drawn as often as one reached at every step.
        steps_of = self._steps_of(able)
        user = self.reach.user
        order = sorted(steps_of, key=lambda site: (site not in user, able.index(site)))
        weighted = [s for s in order for _ in range(USER_WEIGHT if s in user else 1)]
        return st.sampled_from(weighted).flatmap(
            lambda site: st.fixed_dictionaries(
                {"site": st.just(site), "rank": ranks, "step": st.sampled_from(steps_of[site])}
            )
        )

    def _steps_of(self, able: Sequence[str]) -> dict[str, list[int | None]]:
        steps_of: dict[str, list[int | None]] = {}
        for site, step in self.reach.points if self.reach is not None else ():
            if site in able:
                steps_of.setdefault(site, []).append(step)
        return steps_of

    def caught_raises(self) -> st.SearchStrategy[Fault] | None:
        """Raised errors at the sites where the program catches some (``Reach.caught``):
        a site, a rank, one of its steps, then the error: the plain ones first, then each
        caught there (twice, so half the draws are caught ones). None when there are none.

        Drawn with as many choices as ``raises``'s plain branch, so a failure shrinks to
        that branch, and within a site to the plain RuntimeError, whenever those fail too."""
        steps_of = self._steps_of(self.able(Raise.drawn_at))
        errors: dict[str, list[tuple[str, tuple[Any, ...]]]] = {}
        for site, name, args in self.reach.caught if self.reach is not None else ():
            if site in steps_of:
                errors.setdefault(site, list(PLAIN_ERRORS)).extend([(name, args)] * 2)
        if not errors:
            return None
        ranks = st.integers(0, self.world_size - 1)

        def at(site: str) -> st.SearchStrategy[Fault]:
            return st.builds(
                lambda rank, step, error: Raise(*error, site=site, rank=rank, step=step),
                ranks,
                st.sampled_from(steps_of[site]),
                st.sampled_from(errors[site]),
            )

        return st.sampled_from(sorted(errors)).flatmap(at)


def _frames(recorded: Any) -> list[CallFrame]:
    """A call path from the rank's facts: [file, line] pairs, innermost first."""
    if not isinstance(recorded, list):
        return []
    return [(str(f[0]), int(f[1])) for f in recorded if isinstance(f, list) and len(f) == 2]


def _probes_at(
    site: str, rank: int, step: int | None, user: frozenset[str], kinds: set[str], slow_write: bool
) -> list[Fault]:
    found: list[Fault] = []
    slow = (site in user and not site.endswith(PER_BATCH)) or slow_write
    if slow and Delay.kind in kinds:  # a straggler; at a save, a slow write its readers race
        found.append(Delay(PROBE_SECONDS, site=site, rank=rank, step=step))
    if site in ("torch.save", "torch.load") and Raise.kind in kinds:
        found.append(
            Raise("OSError", (28, "No space left on device"), site=site, rank=rank, step=step)
        )
    return found


def _meaningful(site: str, user: frozenset[str]) -> bool:
    return not site.startswith("lightning.") or site in CORE or site in user


def _facts(event: Any) -> dict[str, Any]:
    try:
        doc = json.loads(event.detail)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _with_gradient_sync(points: set[Point]) -> set[Point]:
    """DDP's gradient all-reduce runs inside every backward (the baseline does not observe
    it: that would change DDP's arithmetic), so it is reached wherever the backward is."""
    backward = {step for site, step in points if site == "lightning.backward"}
    return points | {("dist.gradient_allreduce", step) for step in backward}


def _order(point: Point) -> tuple[int, str]:
    site, step = point
    return (-1 if step is None else step, site)


def _bucket(point: Point, count: int) -> int:
    digest = hashlib.sha256(f"{point[0]}@{point[1]}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % count
