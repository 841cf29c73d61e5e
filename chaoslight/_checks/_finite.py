"""Checks that what a step applies is finite: the loss, and the gradients.

In a Trainer they read the step's loss and the gradients before each optimizer step
(Lightning's hooks); in a loop no Trainer runs, the loss the optimizer step applies (the
last backward's) and the gradients the optimizer is about to apply (the loop hooks of
``_runtime/_protocol.py``).
"""

from __future__ import annotations

import math
from typing import Any

from chaoslight._checks._base import Check, Evidence, Violation, observe, observer_class
from chaoslight._checks._invariants import quietly


def _loss_of(outputs: Any) -> Any:
    return outputs.get("loss") if isinstance(outputs, dict) else outputs


class FiniteLoss(Check):
    """Every training step's loss is finite (no NaN or Inf)."""

    name = "finite-loss"
    cause = "a division by zero or log of zero in the loss, an exploding gradient, bad data"

    def observer(self) -> Any:
        check = self

        def on_train_batch_end(self: Any, trainer: Any, module: Any, outputs: Any, *a: Any) -> None:
            import torch

            loss = _loss_of(outputs)
            if not isinstance(loss, torch.Tensor):
                return
            with torch.no_grad(), quietly():  # a scalar loss: one call, no new tensor
                one = loss.numel() == 1
                if math.isfinite(loss.item()) if one else bool(torch.isfinite(loss).all()):
                    return
                value = str(loss.detach().cpu().tolist())
            observe(check.name, trainer, {"value": value})

        # In a loop no Trainer runs, the loss is what the last backward before an
        # optimizer step was given: the one that step applies. A non-finite loss whose
        # step the program then skips (it checked, or a GradScaler did) is not judged.
        last: list[str | None] = [None]  # the last backward's loss, when not finite

        def on_loop_backward(self: Any, tensors: Any) -> None:
            last[0] = _non_finite_loss(tensors)

        def on_loop_before_optimizer_step(self: Any, optimizer: Any) -> None:
            if last[0] is not None:
                observe(check.name, None, {"value": last[0]})
                last[0] = None

        hooks = {
            "on_train_batch_end": on_train_batch_end,
            "on_loop_backward": on_loop_backward,
            "on_loop_before_optimizer_step": on_loop_before_optimizer_step,
        }
        return observer_class("FiniteLossObserver", hooks)()

    def judge(self, evidence: Evidence) -> list[Violation]:
        return _first_bad(self, evidence, lambda facts: f"the loss is {facts['value']}")


def _non_finite_loss(tensors: Any) -> str | None:
    """A backward's one scalar loss as text when it is not finite; None otherwise (a
    finite loss, several tensors, a non-scalar one: nothing a loss check can read)."""
    import torch

    if not isinstance(tensors, torch.Tensor) or tensors.numel() != 1:
        return None
    with torch.no_grad(), quietly():
        value = tensors.detach().item()
    return None if math.isfinite(value) else str(value)


def _first_bad(check: Any, evidence: Evidence, describe: Any) -> list[Violation]:
    """One violation for the earliest (step, rank) observation of ``check``, if any."""
    seen = evidence.observations(check.name)
    bad = [(e.step if e.step is not None else -1, e.rank, f) for e, f in seen]
    if not bad:
        return []
    step, rank, facts = min(bad, key=lambda item: (item[0], item[1]))
    where = {"rank": rank, "step": None if step < 0 else step, "cause": check.cause}
    return [Violation(check.name, describe(facts), **where)]


def _dense(tensor: Any) -> Any:
    return tensor._values() if tensor.is_sparse else tensor


def all_finite(tensors: list[Any]) -> bool:
    """No NaN or Inf in any of the tensors: one fused norm call and one transfer per device.

    A NaN or Inf makes its tensor's norm, and the sum of the norms, NaN or Inf; but so can
    finite values whose norms overflow: False is a hint to confirm element by element.
    """
    import torch

    with torch.no_grad(), quietly():
        for device in dict.fromkeys(t.device for t in tensors):
            norms = torch._foreach_norm([_dense(t) for t in tensors if t.device == device])
            if not math.isfinite(torch.stack(norms).sum().item()):
                return False
    return True


class FiniteGrads(Check):
    """Before every optimizer step, every gradient is finite."""

    name = "finite-grads"
    cause = "a NaN/Inf loss, an exploding gradient without clipping, a bad custom backward"

    def observer(self) -> Any:
        check = self

        def on_before_optimizer_step(self: Any, trainer: Any, module: Any, optimizer: Any) -> None:
            import torch

            grads = [p.grad for p in module.parameters() if p.grad is not None]
            if not grads or all_finite(grads):
                return
            with torch.no_grad(), quietly():  # confirm element by element, name the first
                bad = [
                    name
                    for name, p in module.named_parameters()
                    if p.grad is not None and not bool(torch.isfinite(_dense(p.grad)).all())
                ]
            if bad:
                observe(check.name, trainer, {"parameter": bad[0]})

        def on_loop_before_optimizer_step(self: Any, optimizer: Any) -> None:
            """A loop's optimizer step: the gradients it is about to apply (a GradScaler
            that found a non-finite one skips the step, and this hook with it)."""
            import torch

            params = [p for group in optimizer.param_groups for p in group["params"]]
            grads = [p.grad for p in params if p.grad is not None]
            if not grads or all_finite(grads):
                return
            with torch.no_grad(), quietly():
                bad = [
                    (index, p)
                    for index, p in enumerate(params)
                    if p.grad is not None and not bool(torch.isfinite(_dense(p.grad)).all())
                ]
            if bad:
                index, param = bad[0]
                kind = type(optimizer).__name__
                name = f"parameter {index} of the {kind} optimizer, shape {list(param.shape)}"
                observe(check.name, None, {"parameter": name})

        hooks = {
            "on_before_optimizer_step": on_before_optimizer_step,
            "on_loop_before_optimizer_step": on_loop_before_optimizer_step,
        }
        return observer_class("FiniteGradsObserver", hooks)()

    def judge(self, evidence: Evidence) -> list[Violation]:
        return _first_bad(
            self, evidence, lambda facts: f"the gradient of {facts['parameter']!r} is not finite"
        )
