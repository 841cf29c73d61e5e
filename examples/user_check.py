"""A user check: an invariant of your own, judged like the built-in ones.

    with chaoslight.inject(schedule, checks=[LearningRateUnchanged()]):
        trainer.fit(model)

The observer records the optimizer's learning rate after every step in each rank; the
judge fails the run if any rank's rate ever differs from where it started.
"""

from __future__ import annotations

from typing import Any

from chaoslight.checks import Check, Evidence, Violation, observe, observer_class


class LearningRateUnchanged(Check):
    """The first optimizer's learning rate never changes during fit."""

    name = "learning-rate-unchanged"

    def observer(self) -> Any:
        check = self

        def on_train_batch_end(self: Any, trainer: Any, module: Any, *args: Any) -> None:
            lr = trainer.optimizers[0].param_groups[0]["lr"]
            observe(check.name, trainer, {"lr": lr})

        return observer_class("LearningRateObserver", {"on_train_batch_end": on_train_batch_end})()

    def judge(self, evidence: Evidence) -> list[Violation]:
        first: dict[int, float] = {}
        for event, facts in evidence.observations(self.name):
            start = first.setdefault(event.rank, facts["lr"])
            if facts["lr"] != start:
                return [
                    Violation(
                        self.name,
                        f"lr moved from {start} to {facts['lr']}",
                        rank=event.rank,
                        step=event.step,
                        cause="a scheduler stepping when it should not",
                    )
                ]
        return []
