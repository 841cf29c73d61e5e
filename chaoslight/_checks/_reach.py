"""Recording what a run reaches: every site with the steps it ran at, and which hooks the
user's own classes implement. A search records this in its fault-free baseline run and
then draws only (site, step) points that really happen, with weight on the user's code.

Not a check users pass: it never finds a violation. It rides on the check protocol (the
sites it observes, an observer callback) so neither the runtime nor the World needs to
know about searches.
"""

from __future__ import annotations

from typing import Any

from chaoslight._checks._base import Check, Evidence, Violation, observe, observer_class
from chaoslight._runtime import active
from chaoslight._runtime._frames import LIBRARIES
from chaoslight._schedule import LIGHTNING_HOOKS, LIGHTNING_STEPS, SITES

# Observing DDP's gradient all-reduce registers a comm hook, which changes DDP's averaging
# arithmetic at odd world sizes: the baseline must not perturb the run it measures.
UNOBSERVED = frozenset({"dist.gradient_allreduce"})


def _own(klass: type, name: str) -> bool:
    """True when ``name`` on ``klass`` is defined by a class outside the libraries."""
    for owner in klass.__mro__:
        if name in vars(owner):
            return not owner.__module__.startswith(LIBRARIES)
    return False


def user_sites(module: Any, callbacks: list[Any], datamodule: Any = None) -> list[str]:
    """The Lightning sites whose hook or step the user's module, callbacks or datamodule
    implement."""
    names = set(LIGHTNING_HOOKS) | set(LIGHTNING_STEPS) | {"forward", "backward"}
    found = set()
    owners = [module, *callbacks, *([datamodule] if datamodule is not None else [])]
    for owner in owners:
        for name in names:
            if _own(type(owner), name) and f"lightning.{name}" in SITES:
                found.add(f"lightning.{name}")
    return sorted(found)


class ReachRecorder(Check):
    """Records, per rank, every site reached with its steps, and the user's own hooks."""

    name = "reach"
    sites = frozenset(SITES) - UNOBSERVED

    def observer(self) -> Any:
        check = self

        def on_fit_end(self: Any, trainer: Any, module: Any) -> None:
            injection = active()
            engine = injection.engine if injection is not None else None
            if engine is None:
                return
            steps = {site: seen for site, seen in engine.steps_seen.items() if seen}
            user = user_sites(module, list(trainer.callbacks), trainer.datamodule)
            facts = {"steps": steps, "user": user}
            observe(check.name, trainer, facts)

        return observer_class("ReachObserver", {"on_fit_end": on_fit_end})()

    def judge(self, evidence: Evidence) -> list[Violation]:
        return []
