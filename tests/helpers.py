"""Test helpers: a tiny model, loader and trainer in either Lightning flavour, and more.

    model = tiny_model()                      # lightning.pytorch
    model = tiny_model("pytorch_lightning")   # the standalone package
    tiny_trainer(max_steps=4).fit(model, tiny_loader())
    fit(model, max_steps=4)                   # the same, in one call

The model records what training saw, per step (``fit_loop.total_batch_idx``), so a test
can check what a fault changed: the batches, the losses it returned, the parameters at
the start of each step, and the OOMs its own ``try/except`` blocks caught.

Also: ``patched_attributes``/``changed`` (snapshots of every patch point's attribute) and
``faults``/``schedules`` (Hypothesis strategies for valid faults and schedules).
"""

from __future__ import annotations

import functools
import importlib
import io
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

FLAVOURS = ("lightning.pytorch", "pytorch_lightning")
IN_FEATURES = 4

# Lightning warns when training_step returns None, as TinyModel(catch_forward=True) does
# for a batch whose OOM it caught; tests that expect that use this filter.
SKIPPED_BATCH = "ignore:`training_step` returned `None`:UserWarning"


def pl(flavour: str = "lightning.pytorch") -> Any:
    """The Lightning package of this flavour (``lightning.pytorch`` or ``pytorch_lightning``)."""
    return importlib.import_module(flavour)


def current_step(trainer: Any) -> int:
    """The training batch index across epochs, as chaoslight counts steps."""
    return int(trainer.fit_loop.total_batch_idx)


@functools.cache
def tiny_model_class(flavour: str = "lightning.pytorch") -> type:
    """A ``LightningModule`` subclass of this flavour: one linear layer, MSE loss, SGD."""
    base = pl(flavour).LightningModule

    class TinyModel(base):  # type: ignore[misc, valid-type]
        """Records per step: ``batches``, ``losses``, ``params``, ``caught`` and ``items``.

        - ``catch_forward``: wrap ``self(x)`` in ``try/except torch.OutOfMemoryError``,
          record ``(step, message)`` in ``caught`` and skip the batch (return None).
        - ``item_loss``: call ``loss.item()`` (a sync point) and record it in ``items``.
        - ``log_sync``: ``self.log("loss", loss, sync_dist=True)``.
        - ``step_hook(model, step)``: called at the start of each training_step.
        """

        def __init__(
            self,
            catch_forward: bool = False,
            item_loss: bool = False,
            log_sync: bool = False,
            lr: float = 0.1,
            step_hook: Callable[[Any, int], None] | None = None,
        ) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.layer = torch.nn.Linear(IN_FEATURES, 1)
            self.catch_forward = catch_forward
            self.item_loss = item_loss
            self.log_sync = log_sync
            self.lr = lr
            self.step_hook = step_hook
            self.batches: list[tuple[int, torch.Tensor]] = []
            self.losses: list[tuple[int, torch.Tensor]] = []
            self.params: list[tuple[int, torch.Tensor]] = []
            self.caught: list[tuple[int, str]] = []
            self.items: list[tuple[int, float]] = []
            self.validated: list[tuple[int, int]] = []

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layer(x)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            step = current_step(self.trainer)
            x, y = batch
            self.batches.append((step, x.detach().clone()))
            self.params.append((step, self.flat_params()))
            if self.step_hook is not None:
                self.step_hook(self, step)
            if self.catch_forward:
                try:
                    out = self(x)
                except torch.OutOfMemoryError as exc:
                    self.caught.append((step, str(exc)))
                    return None
            else:
                out = self(x)
            loss = torch.nn.functional.mse_loss(out, y)
            self.losses.append((step, loss.detach().clone()))
            if self.item_loss:
                self.items.append((step, loss.item()))
            if self.log_sync:
                self.log("loss", loss, sync_dist=True)
            return loss

        def flat_params(self) -> torch.Tensor:
            return torch.cat([p.detach().reshape(-1) for p in self.parameters()]).clone()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=self.lr)

    TinyModel.__qualname__ = TinyModel.__name__ = f"TinyModel_{flavour.replace('.', '_')}"
    return TinyModel


@functools.cache
def validating_model_class(flavour: str = "lightning.pytorch") -> type:
    """``TinyModel`` with a validation_step that records ``(step, batch_idx)`` in ``validated``."""

    class ValidatingTinyModel(tiny_model_class(flavour)):  # type: ignore[misc]
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.validated.append((current_step(self.trainer), batch_idx))

    return ValidatingTinyModel


def tiny_model(flavour: str = "lightning.pytorch", validate: bool = False, **options: Any) -> Any:
    """A fresh ``TinyModel`` of this flavour (see ``tiny_model_class`` for the options).

    ``validate=True`` adds a validation_step; give ``fit`` a ``val_loader`` and a
    ``limit_val_batches`` then (``tiny_trainer`` turns validation off by default).
    """
    cls = validating_model_class(flavour) if validate else tiny_model_class(flavour)
    return cls(**options)


def tiny_loader(batches: int = 8, batch_size: int = 4, seed: int = 0) -> DataLoader:
    """``batches`` batches of ``(x, y)``: x is float (batch_size, 4), y float (batch_size, 1)."""
    generator = torch.Generator().manual_seed(seed)
    n = batches * batch_size
    x = torch.randn(n, IN_FEATURES, generator=generator)
    y = torch.randn(n, 1, generator=generator)
    return DataLoader(TensorDataset(x, y), batch_size=batch_size)


def tiny_trainer(flavour: str = "lightning.pytorch", max_steps: int = 4, **options: Any) -> Any:
    """A quiet CPU Trainer: no logger, checkpointing, progress bar, summary or validation."""
    settings: dict[str, Any] = {
        "max_steps": max_steps,
        "accelerator": "cpu",
        "devices": 1,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
        "limit_val_batches": 0,
    }
    settings.update(options)
    return pl(flavour).Trainer(**settings)


def fit(
    model: Any = None,
    flavour: str = "lightning.pytorch",
    max_steps: int = 4,
    loader: DataLoader | None = None,
    val_loader: DataLoader | None = None,
    **trainer_options: Any,
) -> Any:
    """Fit ``model`` (a fresh TinyModel if None) for ``max_steps`` steps; return the model."""
    model = tiny_model(flavour) if model is None else model
    trainer = tiny_trainer(flavour, max_steps=max_steps, **trainer_options)
    loader = loader if loader is not None else tiny_loader()
    trainer.fit(model, loader, val_loader)
    return model


def at(records: list[tuple[int, Any]], step: int) -> list[Any]:
    """The values recorded at ``step`` in one of TinyModel's per-step lists."""
    return [value for s, value in records if s == step]


# -- patch points ----------------------------------------------------------------------


def patched_attributes() -> dict[tuple[int, str], Any]:
    """Every patch point's attribute as stored on each owner: ``vars(owner).get(attr)``.

    Keyed by ``(id(owner), attribute)``; compare two snapshots with ``changed``.
    """
    from chaoslight._sites import MISSING, PATCH_POINTS

    return {
        (id(owner), point.attribute): vars(owner).get(point.attribute, MISSING)
        for point in PATCH_POINTS
        for owner in point.owners()
    }


def changed(before: dict[Any, Any], after: dict[Any, Any]) -> list[Any]:
    """Keys whose object differs (by identity) between two ``patched_attributes`` snapshots."""
    keys = set(before) | set(after)
    return sorted(k for k in keys if before.get(k) is not after.get(k))


# -- threads -----------------------------------------------------------------------------


def saving(start: Any, calls: int, errors: list[BaseException]) -> Callable[[], None]:
    """A thread's target: once ``start`` (a ``threading.Barrier``) lets it go, ``calls``
    calls of ``torch.save``; what it raises goes to ``errors`` for the main thread."""

    def save() -> None:
        try:
            start.wait(timeout=30)
            for _ in range(calls):
                torch.save(1, io.BytesIO())
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    return save


# -- Hypothesis strategies for valid faults --------------------------------------------


def faults(kinds: tuple[str, ...] | None = None) -> Any:
    """A Hypothesis strategy for valid faults of any kind at any site that kind allows."""
    import builtins

    from hypothesis import strategies as st

    from chaoslight import Crash
    from chaoslight._schedule._catalog import SITES
    from chaoslight._schedule._data_faults import CHECKPOINT_EFFECTS, FLIP_BITS, FLIP_TARGETS
    from chaoslight._schedule._faults import (
        CORRUPT_VALUES,
        FAULT_KINDS,
        FREEZE_HOWS,
        MAX_DELAY_SECONDS,
        MAX_FREEZE_S,
        REORDER_ORDERS,
    )
    from chaoslight._schedule._validate import MAX_COUNT

    exceptions = sorted(
        name
        for name, obj in vars(builtins).items()
        if isinstance(obj, type) and issubclass(obj, BaseException)
    )
    json_scalars = (
        st.none()
        | st.booleans()
        | st.integers(-(2**63), 2**63)
        | st.floats(allow_nan=False)
        | st.text(max_size=20)
    )
    sizes = st.integers(1, 2**48)
    params = {
        "delay": st.fixed_dictionaries(
            {"seconds": st.floats(0, MAX_DELAY_SECONDS) | st.integers(0, int(MAX_DELAY_SECONDS))}
        ),
        "oom": st.fixed_dictionaries({"nbytes": sizes, "deferred": st.booleans()}),
        "allocate": st.fixed_dictionaries(
            {"nbytes": sizes, "hold_steps": st.none() | st.integers(1, 10**6)}
        ),
        "drop_sync": st.just({}),
        "reorder": st.fixed_dictionaries(
            {
                "order": st.sampled_from(REORDER_ORDERS)
                | st.integers(1, 8)
                .flatmap(lambda n: st.permutations(range(n)))
                .map(lambda ranks: ",".join(map(str, ranks)))
            }
        ),
        "raise": st.fixed_dictionaries(
            {
                "exception": st.sampled_from(exceptions)
                | st.sampled_from(["torch:OutOfMemoryError", "chaoslight:InvalidSchedule"])
                # any "module:QualName" is valid; only inject() imports it
                | st.tuples(st.text(min_size=1, max_size=12), st.text(max_size=12)).map(":".join),
                "args": st.lists(json_scalars, max_size=3).map(tuple),
            }
        ),
        "corrupt": st.fixed_dictionaries({"value": st.sampled_from(CORRUPT_VALUES)}),
        "crash": st.fixed_dictionaries({"signal": st.sampled_from(sorted(Crash.SIGNALS))}),
        "preempt": st.fixed_dictionaries(
            {"after": st.floats(0, 60, allow_nan=False), "group": st.booleans()}
        ),
        "freeze": st.fixed_dictionaries(
            {
                "seconds": st.none() | st.floats(0.1, MAX_FREEZE_S, allow_nan=False),
                "how": st.sampled_from(FREEZE_HOWS),
            }
        ),
        "pg_abort": st.just({}),
        "flip": st.fixed_dictionaries(
            {
                "target": st.sampled_from(FLIP_TARGETS),
                "tensor": st.integers(0, MAX_COUNT),
                "index": st.integers(0, MAX_COUNT),
                "bit": st.sampled_from(FLIP_BITS),
            }
        ),
        "repeat_batch": st.just({}),
        "drop_batch": st.just({}),
        "bad_checkpoint": st.fixed_dictionaries({"effect": st.sampled_from(CHECKPOINT_EFFECTS)}),
    }
    chosen = tuple(sorted(FAULT_KINDS)) if kinds is None else kinds

    @st.composite
    def build(draw: Any) -> Any:
        kind = draw(st.sampled_from(chosen))
        cls = FAULT_KINDS[kind]
        able = sorted(s for s, info in SITES.items() if cls.needs in (None, *info.capabilities))
        trigger = {
            "site": draw(st.sampled_from(able)),
            "rank": draw(st.none() | st.integers(0, 1024)),
            "step": draw(st.none() | st.integers(0, 10**9)),
            "nth": draw(st.none() | st.integers(1, 10**6)),
            "times": draw(st.none() | st.integers(1, 10**6)),
        }
        return cls(**trigger, **draw(params[kind]))

    return build()


def schedules(kinds: tuple[str, ...] | None = None, max_faults: int = 6) -> Any:
    """A Hypothesis strategy for valid schedules, with or without a memory budget."""
    from hypothesis import strategies as st

    from chaoslight import MemoryBudget, Schedule

    budgets = st.none() | st.builds(
        MemoryBudget, limit_bytes=st.integers(1, 2**48), min_tracked_bytes=st.integers(1, 2**40)
    )
    return st.builds(
        Schedule,
        st.lists(faults(kinds), max_size=max_faults),
        memory_budget=budgets,
        restarts=st.integers(0, 3),
    )


class ExitFails:
    """A check whose exit() raises "check exit failed" (and whose judge finds nothing)."""

    name = "exit-fails"

    def observer(self) -> None:
        return None

    def judge(self, evidence: Any) -> list[Any]:
        return []

    def exit(self) -> None:
        raise RuntimeError("check exit failed")


# CPython up to 3.11.9 can leave a fork-started DataLoader worker stuck in the fork (a race:
# chaoslight reports it apart as this known issue). A run it claimed says nothing of what a
# test of the program checks.
INTERPRETER_FORK = "cpython-fork-head-lock"


def judged_past_the_interpreter(run: Callable[[], Any], tries: int = 3) -> Any:
    """``judge(run())``, run again (``tries`` in all) while the interpreter's fork deadlock
    claimed the run: only that known issue, whose race no fault or program decides."""
    from chaoslight import judge

    verdict = judge(run())
    for _ in range(tries - 1):
        if not any(claim.issue.key == INTERPRETER_FORK for claim in verdict.claims):
            break
        verdict = judge(run())
    return verdict
