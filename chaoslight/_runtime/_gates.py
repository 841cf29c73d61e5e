"""Which patches' calls reach chaoslight at all: a closed gate sends a call straight to the
wrapped function, in C (wrapt reads the gate's truth), with no Python frame of ours.

The engine decides which sites are live at each rank and step (``_live.py``); a patch
whose sites cannot fire now would still cost a wrapper's frame and a look at the clock per
call. Once the engine is told of every move of the clock (it is *steady*: a loop's steps
are the engine's own count, a Trainer's are counted by its training loop's progress,
``_sites/_lightning._progress_moved``), it closes those patches' gates at each move and
opens the ones whose sites can fire, before any call of the new step. Until then (a
Trainer entering fit: a resumed checkpoint may move its step anywhere) every gate is
open and each call looks at the clock as before.

A gate opens for a point (``Gating``) when:

- ``SITE``: one of its sites can fire at this step (on this rank once a process group
  says which; on any rank before), or a fault left work for it: a deferred OOM waits for
  a sync point, a repeated batch for the next fetch;
- ``ALWAYS``: always (it tracks the trainer or the step);
- ``LOOP_CLOCK``: always in a loop no Trainer runs (its calls move the loop's step; its
  wrapper passes a call of a site that cannot fire straight on, uncounted), else when one
  of its sites has a fault that can fire now;
- ``AHEAD``: when one of its sites can fire at this step or the next ``AHEAD_STEPS`` (a
  batch is fetched before the step it belongs to).

Firings are what they were: a call that passes a closed gate could not fire. What is
not kept is the count of those calls: the sites whose gate was ever closed (``unwatched``)
have their calls counted only where the engine saw them, and the report says so.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from chaoslight._sites import Gating, PatchPoint

# How far ahead of the step a batch can be fetched: Lightning's fetcher prefetches one.
AHEAD_STEPS = 8


@dataclass(frozen=True)
class _Group:
    """The patches of one point, and what opens them."""

    gating: Gating
    sites: frozenset[str]
    sync_point: bool
    fetch: bool
    patches: tuple[Any, ...]  # each has open() and close()


@dataclass(frozen=True)
class Decision:
    """What the gates are decided from; ``watch`` None: every gate open."""

    watch: frozenset[str] | None
    ahead: frozenset[str] = frozenset()
    loop: bool = False
    pending_oom: bool = False
    pending_repeat: bool = False


OPEN = Decision(None)


class Gates:
    """The gates of every installed patch, decided together."""

    def __init__(
        self, installed: Iterable[tuple[PatchPoint, list[Any]]], faulted: frozenset[str]
    ) -> None:
        self._faulted = faulted
        self._groups = tuple(
            _Group(point.gating, point.sites, point.sync_point, point.fetch, tuple(patches))
            for point, patches in installed
            if patches and point.gating is not Gating.ALWAYS
        )
        self.ahead_sites = frozenset().union(
            *(g.sites for g in self._groups if g.gating is Gating.AHEAD)
        )
        self._last: Decision | None = None
        # Sites whose gate was closed at some time: their calls then went uncounted.
        self.unwatched: set[str] = set()

    def decide(self, decision: Decision) -> None:
        """Open and close every gate as ``decision`` says (nothing to do if it says what
        the last one did: a training loop's steady state)."""
        if decision == self._last:
            return
        self._last = decision
        for group in self._groups:
            if group.gating is Gating.LOOP_CLOCK and decision.watch is not None:
                # Open or not, its wrapper passes the sites not watched by (``_sites/_loop``).
                self.unwatched.update(group.sites - decision.watch)
            if self._opens(group, decision):
                for patch in group.patches:
                    patch.open()
            else:
                for patch in group.patches:
                    patch.close()
                self.unwatched.update(group.sites)

    def open_all(self) -> None:
        """Every gate open (the clock may move unseen until the engine decides again)."""
        self.decide(OPEN)

    def _opens(self, group: _Group, decision: Decision) -> bool:
        watch = decision.watch
        if watch is None:
            return True
        if (group.sync_point and decision.pending_oom) or (group.fetch and decision.pending_repeat):
            return True
        if group.gating is Gating.LOOP_CLOCK:
            return decision.loop or not group.sites.isdisjoint(watch & self._faulted)
        if group.gating is Gating.AHEAD:
            return not group.sites.isdisjoint(decision.ahead)
        return not group.sites.isdisjoint(watch)
