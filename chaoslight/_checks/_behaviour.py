"""Checks on how a run ends: injected errors surface, and nothing hangs."""

from __future__ import annotations

from typing import Any

from chaoslight._checks._base import Check, Evidence, Violation
from chaoslight._runtime import PROGRESS_SITES, Watchdog
from chaoslight._runtime._events import FIRED
from chaoslight._schedule import OOM, Raise, fault_from_text
from chaoslight._schedule._errors import InvalidArgument

# Lightning re-raises most errors as they are; these are its documented wrappers.
WRAPPERS = ("MisconfigurationException", "ProcessRaisedException")


class ErrorsSurface(Check):
    """An injected OOM/Raise ends ``fit`` with that exception on that rank, and no rank waits.

    Catches the ``training_step`` that catches the OOM and returns ``None`` while the
    other ranks go on to the gradient all-reduce.
    """

    name = "errors-surface"
    cause = (
        "an exception caught and swallowed on one rank "
        "(e.g. `except OutOfMemoryError: return None`)"
    )

    def judge(self, evidence: Evidence) -> list[Violation]:
        violations: list[Violation] = []
        for event in evidence.events:
            if event.kind != FIRED:
                continue
            fault = fault_from_text(event.fault)
            if not isinstance(fault, (OOM, Raise)):
                continue
            expected = (
                "OutOfMemoryError"
                if isinstance(fault, OOM)
                else fault.exception.split(":")[-1].split(".")[-1]
            )
            view = evidence.ranks.get(event.rank)
            if view is None:
                continue
            if view.status == "passed":
                violations.append(
                    Violation(
                        self.name,
                        f"the injected {expected} ({event.fault}) was swallowed: fit returned "
                        "normally on that rank",
                        rank=event.rank,
                        step=event.step,
                        cause=self.cause,
                    )
                )
            elif view.status == "failed" and view.exception_type not in (expected, *WRAPPERS):
                violations.append(
                    Violation(
                        self.name,
                        f"fit ended with {view.exception_type}, not the injected {expected}",
                        rank=event.rank,
                        step=event.step,
                        cause=self.cause,
                    )
                )
            waiting = [r for r in evidence.ranks.values() if r.status == "hung"]
            for other in waiting:
                violations.append(
                    Violation(
                        self.name,
                        f"after the injected {expected} on rank {event.rank}, rank "
                        f"{other.rank} was left waiting: {other.evidence or 'hung'}",
                        rank=other.rank,
                        step=event.step,
                        cause=self.cause,
                    )
                )
            if violations:
                return violations
        return violations


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

    def __init__(self, timeout: float = 30.0) -> None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise InvalidArgument(f"timeout={timeout!r} must be a positive number of seconds")
        self.timeout = float(timeout)
        self.progress_timeout = self.timeout  # the check protocol's bound on progress
        self._dog: Any = None
        self._hang: Any = None

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
        hung = [view for view in evidence.ranks.values() if view.status == "hung"]
        if not hung:
            return []
        where = "; ".join(view.evidence or f"rank {view.rank} hung" for view in hung)
        return [
            Violation(
                self.name,
                f"no progress for {self.timeout:g} s: {where}",
                rank=hung[0].rank,
                cause=self.cause,
            )
        ]
