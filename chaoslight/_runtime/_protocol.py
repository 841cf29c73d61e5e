"""The check protocol: what ``inject`` and the World know of a check, and nothing more.

A check is any object with a ``name``, an ``observer()`` (a Lightning callback run in
every rank, or None) and a ``judge(evidence)``. It may also declare, as attributes:

- ``sites``: the sites its observer needs routed through the engine (default: none);
- ``progress_timeout``: seconds a rank may go without progress before the run counts
  as hung (default: None, no bound of its own; the runner's timeout still holds);
- ``enter()`` / ``exit()``: called around an in-process ``inject`` block;
- ``judge_reruns(evidence, rerun, scratch)``: a judge that needs more runs of the same
  example (a restart from a checkpoint, a second run for determinism). ``rerun`` runs
  it again and returns the new run's evidence: ``rerun(schedule=None, workdir=None,
  resume_from=None)``; ``workdir`` keeps the run's directory (a restart runs in the
  directory of the crashed run) and ``resume_from`` makes a ``fit`` that passes no
  ``ckpt_path`` resume from that checkpoint, as a restarted job would.

An observer (what ``observer()`` returns) may also have ``on_run_start()``, called when the
injection begins, and ``on_loop_end()``, called when it ends in a process where no
Trainer ran (a loop the program writes itself: Fabric, plain PyTorch), where no Trainer
hook would tell it the run is over. In such a process it is also told of the loop's
training: ``on_loop_batch(batch, iterator)`` after each batch a DataLoader iterator
fetched (training's, validation's: the iterator says whose),
``on_loop_backward(tensors)`` after each backward (what was passed to
``torch.autograd.backward``), ``on_loop_before_optimizer_step(optimizer)`` before each
optimizer step (after the step's faults fired) and ``on_loop_after_optimizer_step(optimizer)``
after it, at the loop's step
(``_runtime/_loop_steps.py``). In a Trainer program it is told
``on_loader_prepared(original, prepared, stage)`` each time Lightning readies a loader
the program gave for a stage (``"train"``, ``"val"``, ``"test"``, ``"predict"``): under
DDP ``prepared`` is the loader Lightning rebuilt around a DistributedSampler, which no
hook of Lightning's shows beside the program's own.

The lower layers read these through the helpers below, never by comparing names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from chaoslight._runtime._evidence import Evidence, Violation
from chaoslight._schedule import InvalidArgument, suggest

Rerun = Callable[..., Evidence]


@runtime_checkable
class CheckProtocol(Protocol):
    """The three members every check has; the optional ones are in the module docstring."""

    name: str

    def observer(self) -> Any: ...

    def judge(self, evidence: Evidence) -> list[Violation]: ...


def observed_sites(checks: Iterable[Any]) -> frozenset[str]:
    """The sites the checks' observers need routed through the engine."""
    return frozenset().union(*(frozenset(getattr(c, "sites", ())) for c in checks))


# The hooks that tell an observer of a loop's training (the module docstring).
LOOP_HOOKS = (
    "on_loop_batch",
    "on_loop_backward",
    "on_loop_before_optimizer_step",
    "on_loop_after_optimizer_step",
)


def judges_loops(check: Any) -> bool:
    """Whether ``check`` sees anything of a loop no Trainer runs: an observer with a loop
    hook, or no observer at all (it judges the run's end, which every program has)."""
    observer = check.observer()
    return observer is None or any(callable(getattr(observer, h, None)) for h in LOOP_HOOKS)


def progress_timeout(checks: Iterable[Any], default: float) -> float:
    """The tightest progress bound among the checks, or ``default``."""
    bounds = [getattr(c, "progress_timeout", None) for c in checks]
    return min([default, *(float(b) for b in bounds if b is not None)])


def check_violations(
    check: Any, evidence: Evidence, rerun: Rerun, scratch: Path
) -> list[Violation]:
    """One check's violations: by its rerun judge when it has one, else by ``judge``."""
    if hasattr(check, "judge_reruns"):
        return list(check.judge_reruns(evidence, rerun, scratch))
    return list(check.judge(evidence))


def enter_checks(checks: Iterable[Any]) -> None:
    for check in checks:
        getattr(check, "enter", lambda: None)()


def exit_checks(checks: Iterable[Any]) -> BaseException | None:
    """Call every check's ``exit()``, all of them even if one raises; return the first error."""
    first: BaseException | None = None
    for check in checks:
        try:
            getattr(check, "exit", lambda: None)()
        except BaseException as exc:  # the others still run; the caller re-raises it
            first = first or exc
    return first


# Checks by their stable names (``--check replicas-in-sync``). The checks layer fills it
# when it is imported (``import chaoslight`` imports it), so the runtime and the World can
# accept names without importing the layer above them.
CHECK_FACTORIES: dict[str, Callable[..., Any]] = {}


def register_check(name: str, factory: Callable[..., Any]) -> None:
    CHECK_FACTORIES[name] = factory


def check_from_name(name: str, **params: Any) -> Any:
    """A check built from its stable name and parameters."""
    factory = CHECK_FACTORIES.get(name)
    if factory is None:
        known = ", ".join(CHECK_FACTORIES) or "none registered"
        raise InvalidArgument(
            f"check {name!r} is not a check{suggest(name, CHECK_FACTORIES)}; known: {known}"
        )
    return factory(**params)


def as_checks(checks: Iterable[Any]) -> list[Any]:
    """Check objects from objects or names; anything else is a one-line error."""
    if isinstance(checks, (str, bytes)):
        raise InvalidArgument(f"checks={checks!r} must be a list of checks or check names")
    result = []
    for index, check in enumerate(checks):
        if isinstance(check, str):
            result.append(check_from_name(check))
        elif isinstance(check, CheckProtocol):
            result.append(check)
        else:
            raise InvalidArgument(
                f"checks[{index}]={check!r} is not a check: give a name such as "
                "'replicas-in-sync' or an object with name, observer() and judge()"
            )
    return result
