"""Faults during recovery, as a search draws them: where a resumed run goes that the
fault-free baseline never went, and which drawn faults are bound to the restarted run.

A schedule with a restart is two runs of the job; the second resumes (it reads back
what the first left) and can fail again while it does. ``schedules()`` binds some drawn
faults to run 2 and adds one at a site only a resumed run reaches.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from chaoslight._schedule import FAULT_KINDS, Fault, MemoryBudget, Severity
from chaoslight._search._reach import Space

# Where a resumed run goes that a first run does not: the checkpoint is read back.
RESUME_SITES = ("lightning.load_checkpoint", "lightning.on_load_checkpoint", "torch.load")


def resume_sites(sites: Iterable[str] | None, reach: object | None) -> list[str]:
    """The resume sites a search may draw at: with a baseline's reach (which cannot have
    reached them), those among ``sites`` (all of them when None)."""
    if reach is None:
        return []
    chosen = None if sites is None else set(sites)
    return [site for site in RESUME_SITES if chosen is None or site in chosen]


def can_draw_at(sites: list[str], kinds: Iterable[str]) -> bool:
    """Whether any of ``kinds`` can fire at one of ``sites``."""
    space = Space(2, sites, 1)
    return any(space.can_take(FAULT_KINDS[k].drawn_at) for k in kinds)


def bind_to_second_run(
    items: list[Fault], bind: list[int], budget: MemoryBudget | None
) -> list[Fault]:
    """Each fault whose ``bind`` draw is 3 bound to run 2, unless no fault left in run 1
    could end it (a benign one cannot): then no restart would come."""
    bound = list(items)
    for index, draw in enumerate(bind[: len(items)]):
        if draw != 3:
            continue
        trial = [*bound[:index], replace(bound[index], run=2), *bound[index + 1 :]]
        if any(f.run is None and f.fault_class(budget) != Severity.BENIGN for f in trial):
            bound = trial
    return bound
