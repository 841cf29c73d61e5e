"""Checks on how a run ends: injected errors surface, and nothing hangs."""

from __future__ import annotations

from typing import Any

from chaoslight._checks._base import Check, Evidence, Violation
from chaoslight._report import CRASHED, FAILED, HUNG, PASSED
from chaoslight._runtime import PROGRESS_SITES, Watchdog
from chaoslight._runtime._events import parse_fired
from chaoslight._schedule._validate import check_seconds
from chaoslight._world import WORLD_TIMEOUT_S


class ErrorsSurface(Check):
    """An injected OOM/Raise is not swallowed on its rank while another rank fails or waits.

    A correct program may recover from an injected error consistently (every rank goes on
    and finishes) or fail cleanly (every rank ends). What it may not do is catch the error
    on the rank where it fired and carry on while a peer fails or is left waiting: the
    ``training_step`` that catches the OOM and returns ``None`` while the other ranks go on
    to the gradient all-reduce.
    """

    name = "errors-surface"
    cause = (
        "an exception caught and swallowed on one rank "
        "(e.g. `except OutOfMemoryError: return None`)"
    )

    def judge(self, evidence: Evidence) -> list[Violation]:
        stuck = [v for v in evidence.ranks.values() if v.status in (FAILED, HUNG, CRASHED)]
        for fired in parse_fired(evidence.events):
            fault = fired.fault
            view = evidence.ranks.get(fired.rank)
            if not fault.catchable or view is None or view.status != PASSED:
                continue
            others = [v for v in stuck if v.rank != fired.rank]
            if others:
                other = others[0]
                return [
                    Violation(
                        self.name,
                        f"the injected {fault.kind} ({fired.text}) was swallowed on rank "
                        f"{fired.rank}, which finished, while rank {other.rank} "
                        f"{'was left waiting' if other.status == HUNG else 'did not'}: "
                        f"{other.evidence or other.status}",
                        rank=fired.rank,
                        step=fired.step,
                        cause=self.cause,
                    )
                ]
        return []


class NoHang(Check):
    """No rank goes ``timeout`` seconds without reaching a site; the evidence names where.

    In a World this is the World's own watchdog at this limit; in-process ``inject`` runs
    the same watchdog in a thread and interrupts the main thread on a hang.
    """

    name = "no-hang"
    cause = (
        "a collective or barrier that not every rank reaches "
        "(a rank-dependent branch, a swallowed error)"
    )

    @property
    def sites(self) -> frozenset[str]:
        """The sites the watchdog watches for progress (collectives, steps, batch hooks)."""
        return PROGRESS_SITES

    def __init__(self, timeout: float = WORLD_TIMEOUT_S) -> None:
        self.timeout = check_seconds("timeout", timeout)
        self._dog: Any = None
        self._hang: Any = None

    @property
    def progress_timeout(self) -> float:
        """The check protocol's bound on progress: a run idle this long is hung."""
        return self.timeout

    def enter(self) -> None:
        self._hang = None
        self._dog = Watchdog(self.timeout, self._on_hang, interrupt_after=1.0)
        self._dog.__enter__()

    def exit(self) -> None:
        if self._dog is not None:
            dog, self._dog = self._dog, None
            dog.__exit__(None, None, None)

    def _on_hang(self, report: Any) -> None:
        self._hang = report

    def judge(self, evidence: Evidence) -> list[Violation]:
        if self._hang is not None:
            return [
                Violation(
                    self.name,
                    f"no progress for {self.timeout:g} s: {self._hang.line()}",
                    cause=self.cause,
                )
            ]
        hung = [view for view in evidence.ranks.values() if view.status == HUNG]
        if not hung:
            return []
        where = "; ".join(view.evidence or f"rank {view.rank} hung" for view in hung)
        return [
            Violation(
                self.name,
                f"hung (no progress for {self.timeout:g} s, or the ranks' collectives "
                f"differ): {where}",
                rank=hung[0].rank,
                cause=self.cause,
            )
        ]
