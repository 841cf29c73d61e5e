"""Injection sites: the patch points that route torch and Lightning calls to the runtime.

A *site* is a name from the catalogue (``lightning.training_step``); a *patch point* is
one attribute that gets a wrapt wrapper (``lightning.pytorch.trainer.call:
_call_strategy_hook``). One patch point may serve many sites, and one site may need
several patch points (both Lightning flavours, ``torch.distributed`` and its c10d
module). Patches are installed only for the sites a schedule names, and each wrapper
passes straight through when no dispatcher is active.
"""

from __future__ import annotations

from collections.abc import Iterable

from chaoslight._schedule._catalog import SITES
from chaoslight._sites import _async_work, _ddp, _fabric, _lightning, _loop, _torch
from chaoslight._sites._core import (
    STATE,
    Behaviour,
    Dispatcher,
    Gating,
    PatchPoint,
)
from chaoslight._sites._patch import MISSING, Patch, resolve

PATCH_POINTS: tuple[PatchPoint, ...] = (
    _lightning.LIGHTNING_POINTS
    + _ddp.DDP_POINTS
    + _torch.TORCH_POINTS
    + _async_work.ASYNC_WORK_POINTS
    + _loop.LOOP_POINTS
    + _fabric.FABRIC_POINTS
)

__all__ = [
    "MISSING",
    "PATCH_POINTS",
    "STATE",
    "Behaviour",
    "Dispatcher",
    "Gating",
    "Patch",
    "PatchPoint",
    "install",
    "points_for",
]


def points_for(sites: Iterable[str], deferred_oom: bool = False) -> list[PatchPoint]:
    """The patch points needed for these sites (plus the runtime's own tracking points)."""
    wanted = set(sites)
    unknown = wanted - set(SITES)
    if unknown:
        raise KeyError(sorted(unknown)[0])
    chosen = []
    for point in PATCH_POINTS:
        if point.always or point.sites & wanted or (deferred_oom and point.sync_point):
            chosen.append(point)
    return chosen


def install(points: Iterable[PatchPoint]) -> list[tuple[PatchPoint, list[Patch]]]:
    """Wrap every available owner of every point; each point with its patches, in install
    order (``[p for _, ps in installed for p in ps]`` is what ``uninstall`` takes).

    On any failure the patches made so far are undone before the error propagates.
    """
    installed: list[tuple[PatchPoint, list[Patch]]] = []
    try:
        for point in points:
            installed.append((point, point.install()))
    except BaseException:
        uninstall([patch for _, patches in installed for patch in patches])
        raise
    return installed


def uninstall(patches: list[Patch]) -> None:
    """Undo patches in reverse order, so an attribute wrapped twice unwinds correctly.

    Each undo removes only our own layer: a third party's wrapper made on top of ours
    while we were active survives (see ``_patch``). One undo that fails does not stop the
    others; the first error is raised once all have been tried.
    """
    failed: BaseException | None = None
    for patch in reversed(patches):
        try:
            patch.undo()
        except BaseException as exc:  # the rest must still be undone; re-raised below
            failed = failed or exc
    patches.clear()
    if failed is not None:
        raise failed


def implemented_sites() -> frozenset[str]:
    return frozenset().union(*(point.sites for point in PATCH_POINTS))


_ = resolve  # re-exported for tests that look up owners by path
