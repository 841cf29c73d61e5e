"""The training step of a loop that no Trainer runs (plain PyTorch, Lightning Fabric).

A Trainer counts its batches; a loop a program writes itself says nothing, so chaoslight
counts what every training loop does: **step k is the loop's k-th iteration, the one whose
optimizer step is the k-th.** Step 0 begins with the first backward (or optimizer step),
so what runs before training (the model's setup, a first evaluation) has no step, as
before a Trainer's first batch; the first batch's fetch and forward, which come before
that backward, are step 0 too at the loop's own sites. An optimizer step ends its step,
but what follows it in the same iteration (logging a reduced loss, saving a checkpoint)
still belongs to it: the next step begins at the next batch fetched, forward through a
Fabric model, backward or optimizer step. Validation run between two training steps
belongs to the next (a Trainer counts it as the one before).

A loop with no optimizer step, or several per batch (a GAN's two optimizers), marks its
steps itself with ``chaoslight.mark_step()`` at the end of each; from the first mark on,
only marks end steps, and each mark begins the next at once. A resumed program's steps
count from 0 again: chaoslight cannot see where the program resumed.
"""

from __future__ import annotations

import weakref
from typing import Any


class LoopSteps:
    """The step counter; ``step`` is None until training begins."""

    def __init__(self) -> None:
        self.step: int | None = None
        self.marked = False
        self.ended = False  # the step's optimizer step ran: the next call of a step begins one
        # The optimizer that last stepped: what a flip in a loop reads its tensors from.
        self._optimizer: Any = None

    def training_call(self, begins: bool) -> None:
        """A call that belongs to a training step runs: the step after one that ended
        begins; with ``begins`` (a backward, an optimizer step), step 0 begins too."""
        if self.step is None:
            if begins:
                self.step = 0
        elif self.ended:
            self.step += 1
            self.ended = False

    def optimizer_stepped(self, optimizer: Any) -> None:
        try:
            self._optimizer = weakref.ref(optimizer)
        except TypeError:  # an optimizer that cannot be weakly referenced: not kept
            self._optimizer = None
        if not self.marked:
            self.ended = True

    def mark(self) -> None:
        """The program's own end of a step: the next begins now."""
        if not self.marked:
            self.marked, self.ended, self.step = True, False, 0
        self.step = (self.step or 0) + 1

    @property
    def optimizer(self) -> Any:
        return self._optimizer() if self._optimizer is not None else None


class OptimizerParameters:
    """The parameters optimizers step, as a module would list them: by param group and
    position, prefixed with the optimizer's index where there are several (a loop has no
    module names)."""

    def __init__(self, optimizers: list[Any]) -> None:
        self._optimizers = optimizers

    def named_parameters(self) -> list[tuple[str, Any]]:
        several = len(self._optimizers) > 1
        return [
            (f"{k}." * several + f"param_groups[{g}][{i}]", param)
            for k, optimizer in enumerate(self._optimizers)
            for g, group in enumerate(optimizer.param_groups)
            for i, param in enumerate(group["params"])
        ]


class LoopView:
    """A loop's training tensors as a flip reads a Trainer's: the module's parameters and
    the optimizers (here: those the optimizer that last stepped holds)."""

    def __init__(self, optimizer: Any) -> None:
        self.lightning_module = OptimizerParameters([optimizer])
        self.optimizers = [optimizer]
