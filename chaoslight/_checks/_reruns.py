"""Checks that compare whole runs: the same target and schedule must give the same result."""

from __future__ import annotations

from typing import Any

from chaoslight._checks._base import Check, Evidence, Violation, observe, observer_class
from chaoslight._checks._invariants import checksums
from chaoslight._errors import InvalidArgument


class Deterministic(Check):
    """``runs`` runs of the same target and schedule end with the same weights and metrics.

    In a World the example is run ``runs`` times. In-process, keep one ``Deterministic``
    object and inject it around each run: every run after the first is compared with it.
    On mismatch the first step where the runs part is named.
    """

    name = "deterministic"
    cause = (
        "unseeded randomness (seed_everything missing or per-rank), nondeterministic "
        "kernels, a reduction order that depends on timing, state carried between runs"
    )

    def __init__(self, runs: int = 2, atol: float = 0.0) -> None:
        if isinstance(runs, bool) or not isinstance(runs, int) or runs < 2:
            raise InvalidArgument(f"runs={runs!r} must be an int of at least 2")
        self.runs = runs
        self.atol = atol
        self._first: Evidence | None = None

    def observer(self) -> Any:
        check = self

        def on_train_batch_end(self: Any, trainer: Any, module: Any, *args: Any) -> None:
            names, sums = checksums(module)
            observe(check.name, trainer, {"names": names, "sums": sums})

        def on_train_end(self: Any, trainer: Any, module: Any) -> None:
            metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
            observe(check.name, trainer, {"final": True, "metrics": metrics})

        hooks = {"on_train_batch_end": on_train_batch_end, "on_train_end": on_train_end}
        return observer_class("DeterministicObserver", hooks)()

    def judge(self, evidence: Evidence) -> list[Violation]:
        """In-process: compare with the first run this object saw."""
        if self._first is None:
            self._first = evidence
            return []
        return self.compare(self._first, evidence)

    def judge_runs(self, runs: list[Evidence]) -> list[Violation]:
        for later in runs[1:]:
            violations = self.compare(runs[0], later)
            if violations:
                return violations
        return []

    def compare(self, first: Evidence, second: Evidence) -> list[Violation]:
        a, b = self._steps(first), self._steps(second)
        for key in sorted(set(a) | set(b), key=lambda k: (k[0], -1 if k[1] is None else k[1])):
            rank, step = key
            if key not in a or key not in b:
                return [
                    Violation(
                        self.name,
                        "the runs took different numbers of steps",
                        rank=rank,
                        step=step,
                        cause=self.cause,
                    )
                ]
            for name, x, y in zip(a[key]["names"], a[key]["sums"], b[key]["sums"], strict=False):
                diff = max(abs(p - q) for p, q in zip(x, y, strict=True))
                if (self.atol == 0.0 and x != y) or diff > self.atol:
                    return [
                        Violation(
                            self.name,
                            f"the runs part at parameter {name!r} (checksum difference {diff:.3g})",
                            rank=rank,
                            step=step,
                            cause=self.cause,
                        )
                    ]
        return self._metrics(first, second)

    def _steps(self, evidence: Evidence) -> dict[tuple[int, int | None], dict[str, Any]]:
        return {(e.rank, e.step): f for e, f in evidence.observations(self.name) if "sums" in f}

    def _metrics(self, first: Evidence, second: Evidence) -> list[Violation]:
        final_a = {e.rank: f["metrics"] for e, f in first.observations(self.name) if "final" in f}
        final_b = {e.rank: f["metrics"] for e, f in second.observations(self.name) if "final" in f}
        for rank in sorted(final_a):
            for key, value in final_a[rank].items():
                other = final_b.get(rank, {}).get(key)
                if (
                    other is None
                    or abs(other - value) > self.atol
                    or (self.atol == 0 and other != value)
                ):
                    return [
                        Violation(
                            self.name,
                            f"logged metric {key!r} is {value!r} in the first "
                            f"run and {other!r} in another",
                            rank=rank,
                            cause=self.cause,
                        )
                    ]
        return []
