"""The buffers check: BatchNorm-style running statistics agree across ranks wherever a
correct program has them in sync, and nowhere else.

DDP keeps the replicas' *parameters* equal after every step, but their buffers only where
it copies them: with ``broadcast_buffers=True`` (the default) it broadcasts rank 0's
buffers at the start of a forward (``DistributedDataParallel._pre_forward``), and only of a
forward that follows a synced training forward (``require_forward_param_sync``: not the
first forward after ``no_sync`` micro-batches or after a validation run). Right after
the step's update each rank's statistics differ again, until the next broadcast. So:

- ``broadcast_buffers=True``: the ranks' buffers are compared right after a broadcast DDP
  really did, in a forward pre-hook of the LightningModule (DDP calls it from its forward
  after ``_pre_forward``), armed by a pre-hook of the DDP wrapper that asks DDP whether it
  will sync (``_check_sync_bufs_pre_fwd``). At most once per optimizer step.
- ``broadcast_buffers=False``: nothing of DDP syncs them; a correct program averages them
  itself (timm's ``distribute_bn`` at each epoch end), or keeps them frozen. They are
  observed after each epoch's hooks (the module's ``on_train_epoch_end`` runs after the
  callbacks': seen at the next epoch's start) and at the end of training (``on_train_end``
  and ``on_fit_end``). A program may sync at any of these or only at the end, so the run
  fails only when the statistics still differ at the end of training; the report names
  the first epoch end where they differed.

What is compared: the floating running statistics of every norm layer
(``torch.nn.modules.batchnorm._NormBase``); other floating buffers only where the
fault-free reference had them equal at every point (a per-rank cache or a random buffer
differs there, and is left alone). Integer buffers (``num_batches_tracked``) are not
compared. Comparison is exact (the bits' wrapping sum, ``summaries(bits=True)``).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from chaoslight._checks._base import (
    Check,
    Evidence,
    Violation,
    cannot_judge,
    observe,
    observer_class,
)
from chaoslight._checks._invariants import ddp_modules, quietly, summaries
from chaoslight._checks._reference import fault_free, passed_everywhere
from chaoslight._runtime._protocol import Rerun

# Where the ranks' buffers are observed: after DDP's broadcast, at an epoch boundary
# (after every hook of the epoch that ended), at the end of training.
AT_BROADCAST, AT_EPOCH_END, AT_TRAINING_END = "forward", "epoch", "end"
SEVERAL_MODULES = (
    "several DistributedDataParallel modules with buffers train in this loop: which "
    "broadcast belongs to which forward is not told apart"
)


def tracked_buffers(module: Any, ignored: set[str]) -> tuple[list[str], list[bool], list[Any]]:
    """The module's floating buffers that DDP does not ignore: names, whether each is a
    norm layer's running statistic, the tensors."""
    import torch
    from torch.nn.modules.batchnorm import _NormBase

    names, norms, tensors = [], [], []
    for prefix, sub in module.named_modules():
        for name, buffer in sub.named_buffers(recurse=False):
            full = f"{prefix}.{name}" if prefix else name
            if buffer is None or not torch.is_floating_point(buffer) or full in ignored:
                continue
            names.append(full)
            norms.append(isinstance(sub, _NormBase))
            tensors.append(buffer)
    return names, norms, tensors


def broadcasts(ddp: Any) -> bool:
    """Whether DDP broadcasts rank 0's buffers at the start of its synced forwards."""
    broadcast = getattr(ddp, "forward_sync_buffers", None)
    if broadcast is None:  # torch before forward_sync_buffers
        broadcast = getattr(ddp, "broadcast_buffers", True)
    return bool(broadcast)


def will_broadcast(ddp: Any) -> bool:
    """DDP's own decision, taken the same way in its ``_pre_forward``: does this forward
    begin by broadcasting rank 0's buffers? False where torch's internals are unknown."""
    try:
        if getattr(ddp, "_use_python_reducer", False) or getattr(
            ddp, "_delay_all_reduce_all_params", False
        ):
            return False
        return bool(ddp._check_sync_bufs_pre_fwd())
    except AttributeError:  # another torch: not judged rather than guessed
        return False


class BuffersInSync(Check):
    """Norm layers' running statistics agree across ranks where a correct program has them
    in sync: right after DDP's buffer broadcast, or at the end of training when DDP does
    not broadcast them (``broadcast_buffers=False``)."""

    name = "buffers-in-sync"
    cause = (
        "BatchNorm statistics never synchronised across ranks: DDPStrategy("
        "broadcast_buffers=False) with trainable BatchNorm. Average them at each epoch end "
        "(timm's distribute_bn), keep broadcast_buffers=True, or use SyncBatchNorm"
    )
    broadcast_cause = (
        "a buffer changed after DDP broadcast it and before the forward (a forward "
        "pre-hook that writes a buffer on one rank), or a broadcast that did not arrive"
    )

    def observer(self) -> Any:
        check = self
        state: dict[str, Any] = {"fit": -1, "handles": [], "mode": None, "armed": False}

        def record(trainer: Any, module: Any, point: str, epoch: int | str | None) -> None:
            names, _, tensors = tracked_buffers(module, state["ignored"])
            facts = {"fit": state["fit"], "point": point, "epoch": epoch, "names": names}
            observe(check.name, trainer, facts | {"sums": summaries(tensors, bits=True)})

        def on_fit_start(self: Any, trainer: Any, module: Any) -> None:
            state["fit"] += 1
            state["mode"] = None

        def on_train_start(self: Any, trainer: Any, module: Any) -> None:
            from torch.nn.parallel import DistributedDataParallel

            ddp = getattr(trainer.strategy, "model", None)
            if trainer.world_size < 2 or not isinstance(ddp, DistributedDataParallel):
                return  # one replica, or a strategy whose buffers this check does not know
            state["ignored"] = set(getattr(ddp, "parameters_to_ignore", ()) or ())
            names, norms, _ = tracked_buffers(module, state["ignored"])
            if not names:
                return
            state["mode"] = AT_BROADCAST if broadcasts(ddp) else AT_EPOCH_END
            state["first_epoch"] = trainer.current_epoch
            facts = {"fit": state["fit"], "mode": state["mode"], "names": names, "norm": norms}
            observe(check.name, trainer, facts)
            if state["mode"] == AT_BROADCAST:
                arm_on_broadcast(trainer, ddp, module)

        def arm_on_broadcast(trainer: Any, ddp: Any, module: Any) -> None:
            def before_ddp(wrapper: Any, args: Any) -> None:  # a loop's: the DDP module's mode
                state["armed"] = (trainer or wrapper).training and will_broadcast(wrapper)

            def after_broadcast(inner: Any, args: Any) -> None:
                # The first call of the module inside DDP's forward: right after the sync.
                if state["armed"]:
                    state["armed"] = False
                    with quietly():
                        record(trainer, inner, AT_BROADCAST, None)

            state["handles"] = [
                ddp.register_forward_pre_hook(before_ddp),
                module.register_forward_pre_hook(after_broadcast),
            ]

        def on_train_epoch_start(self: Any, trainer: Any, module: Any) -> None:
            if state["mode"] == AT_EPOCH_END and trainer.current_epoch > state["first_epoch"]:
                record(trainer, module, AT_EPOCH_END, trainer.current_epoch - 1)

        def on_train_end(self: Any, trainer: Any, module: Any) -> None:
            # After the last epoch's hooks, before the module's own on_train_end.
            if state["mode"] == AT_EPOCH_END:
                record(trainer, module, AT_TRAINING_END, "train")
            release()

        def on_fit_end(self: Any, trainer: Any, module: Any) -> None:
            # After the module's on_train_end: a program that averages them there is seen.
            if state["mode"] == AT_EPOCH_END:
                record(trainer, module, AT_TRAINING_END, "fit")
            state["mode"] = None

        def release(*args: Any, **kwargs: Any) -> None:
            for handle in state["handles"]:
                handle.remove()
            state["handles"] = []
            state["armed"] = False

        hooks = {
            "on_fit_start": on_fit_start,
            "on_train_start": on_train_start,
            "on_train_epoch_start": on_train_epoch_start,
            "on_train_end": on_train_end,
            "on_fit_end": on_fit_end,
            "on_exception": release,
            "teardown": release,
            **_loop_hooks(check.name, state, record, arm_on_broadcast, release),
        }
        return observer_class("BuffersInSyncObserver", hooks)()

    def judge(self, evidence: Evidence) -> list[Violation]:
        return self._violations(evidence, {})

    def judge_reruns(self, evidence: Evidence, rerun: Rerun, scratch: Path) -> list[Violation]:
        if not passed_everywhere(evidence):
            return []  # the oracle counts a plain violation only on a run that passed
        found = self._violations(evidence, {})
        if found or not self._others_differ(evidence):
            return found
        # A buffer outside the norm layers differs: judge it only where the fault-free
        # run had it equal at every point (else it is per-rank by design).
        references = fault_free(self, evidence, rerun, 1)
        if not references:
            return []
        return self._violations(evidence, self._equal_everywhere(references[0]))

    def _points(self, evidence: Evidence) -> dict[tuple[int, str, Any], dict[int, Any]]:
        """Observations by (fit, point, step or epoch), each rank's facts."""
        points: dict[tuple[int, str, Any], dict[int, Any]] = defaultdict(dict)
        for event, facts in evidence.observations(self.name):
            if "point" not in facts:
                continue
            where = event.step if facts["point"] == AT_BROADCAST else facts["epoch"]
            points[(int(facts["fit"]), facts["point"], where)].setdefault(event.rank, facts)
        return points

    def _norms(self, evidence: Evidence) -> dict[int, set[str]]:
        """Per fit, the names of the norm layers' statistics."""
        norms: dict[int, set[str]] = defaultdict(set)
        for _, facts in evidence.observations(self.name):
            if "mode" in facts:
                pairs = zip(facts["names"], facts["norm"], strict=False)
                norms[int(facts["fit"])].update(name for name, norm in pairs if norm)
        return norms

    def _differing(self, ranks: dict[int, Any], names: set[str] | None) -> tuple[str, int] | None:
        """The first tracked buffer (of ``names``; None: every one) that differs, and the
        rank where it does."""
        base = ranks[min(ranks)]
        for rank in sorted(ranks):
            theirs = dict(zip(ranks[rank]["names"], ranks[rank]["sums"], strict=False))
            for name, mine in zip(base["names"], base["sums"], strict=False):
                if names is not None and name not in names:
                    continue
                other = theirs.get(name)
                if other is not None and any(
                    a != b and (a == a or b == b) for a, b in zip(mine, other, strict=False)
                ):
                    return name, rank
        return None

    def _violations(self, evidence: Evidence, extra: dict[int, set[str]]) -> list[Violation]:
        """The first fit's first break: norm statistics, and ``extra``'s buffers per fit."""
        points, norms = self._points(evidence), self._norms(evidence)
        for fit in sorted({fit for fit, _, _ in points}):
            names = norms.get(fit, set()) | extra.get(fit, set())
            mine = {key[1:]: ranks for key, ranks in points.items() if key[0] == fit}
            found = self._fit(mine, names)
            if found is not None:
                return [found]
        return []

    def _fit(
        self, points: dict[tuple[str, Any], dict[int, Any]], names: set[str]
    ) -> Violation | None:
        compared = {key: ranks for key, ranks in points.items() if len(ranks) > 1}
        broadcasts = sorted(where for point, where in compared if point == AT_BROADCAST)
        for step in broadcasts:
            found = self._differing(compared[(AT_BROADCAST, step)], names)
            if found is not None:
                name, rank = found
                message = (
                    f"buffer {name!r} differs between rank 0 and rank {rank} right after DDP "
                    "broadcast rank 0's buffers at the start of the step's forward"
                )
                return Violation(
                    self.name, message, rank=rank, step=step, cause=self.broadcast_cause
                )
        ends = [ranks for (point, _), ranks in compared.items() if point == AT_TRAINING_END]
        if not ends or any(self._differing(ranks, names) is None for ranks in ends):
            return None  # in sync at the end of training (or never reached it): correct
        for epoch in sorted(where for point, where in compared if point == AT_EPOCH_END):
            found = self._differing(compared[(AT_EPOCH_END, epoch)], names)
            if found is not None:
                return self._unsynced(*found, f"at the end of epoch {epoch}")
        name, rank = self._differing(ends[0], names) or ("", 1)
        return self._unsynced(name, rank, "at the end of training")

    def _unsynced(self, name: str, rank: int, where: str) -> Violation:
        message = (
            f"buffer {name!r} differs between rank 0 and rank {rank} {where} and still at "
            "the end of training: DDP does not broadcast buffers (broadcast_buffers=False) "
            "and the program never averaged them"
        )
        return Violation(self.name, message, rank=rank, cause=self.cause)

    def _others_differ(self, evidence: Evidence) -> bool:
        norms = self._norms(evidence)
        for (fit, _, _), ranks in self._points(evidence).items():
            if len(ranks) > 1:
                others = set(ranks[min(ranks)]["names"]) - norms.get(fit, set())
                if others and self._differing(ranks, others) is not None:
                    return True
        return False

    def _equal_everywhere(self, reference: Evidence) -> dict[int, set[str]]:
        """Per fit, the buffers outside norm layers that the reference had equal across
        ranks at every point it observed."""
        equal: dict[int, set[str]] = {}
        norms = self._norms(reference)
        for (fit, _, _), ranks in sorted(self._points(reference).items(), key=str):
            if len(ranks) < 2:
                continue
            names = equal.setdefault(fit, set(ranks[min(ranks)]["names"]) - norms.get(fit, set()))
            for name in list(names):
                if self._differing(ranks, {name}) is not None:
                    names.discard(name)
        return equal


def _loop_hooks(
    check: str, state: dict[str, Any], record: Any, arm_on_broadcast: Any, release: Any
) -> dict[str, Any]:
    """The observer's hooks in a loop no Trainer runs, sharing its ``state`` and helpers."""

    # In a loop no Trainer runs: the DistributedDataParallel module, found at the
    # loop's first optimizer step, as replicas-in-sync finds it; one fit (0), its
    # broadcasts (from the next step's forward on) or, without them, the end of the
    # loop (``on_loop_end``: a program that averages them before returning is seen).
    def on_loop_after_optimizer_step(self: Any, optimizer: Any) -> None:
        if state["fit"] >= 0:
            return  # found already (or a Trainer runs: its hooks observe)
        state["fit"] = 0
        modules = [m for ref in ddp_modules() if (m := ref()) is not None]
        with_buffers = [m for m in modules if tracked_buffers(m.module, set())[0]]
        if len(with_buffers) > 1:
            cannot_judge(check, SEVERAL_MODULES)
        if len(with_buffers) != 1:
            return
        ddp = with_buffers[0]
        state["ignored"] = set(getattr(ddp, "parameters_to_ignore", ()) or ())
        names, norms, _ = tracked_buffers(ddp.module, state["ignored"])
        state["mode"] = AT_BROADCAST if broadcasts(ddp) else AT_EPOCH_END
        state["loop_module"] = ddp.module
        facts = {"fit": 0, "mode": state["mode"], "names": names, "norm": norms}
        observe(check, None, facts)
        if state["mode"] == AT_BROADCAST:
            arm_on_broadcast(None, ddp, ddp.module)

    def on_loop_end(self: Any) -> None:
        module = state.pop("loop_module", None)
        if module is not None and state["mode"] == AT_EPOCH_END:
            record(None, module, AT_TRAINING_END, "loop")
        release()

    return {
        "on_loop_after_optimizer_step": on_loop_after_optimizer_step,
        "on_loop_end": on_loop_end,
    }
