"""Recording what a run reaches: every site with the steps it ran at, which hooks the
user's own classes implement, and the program's frames on each site's call path (where the
search reads which errors the program catches there). A search records this in its
fault-free baseline run and then draws only (site, step) points that really happen, with
weight on the user's code, and raises there the errors the program catches.

Not a check users pass: it never finds a violation. It rides on the check protocol (the
sites it observes, an observer callback) so neither the runtime nor the World needs to
know about searches.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

from chaoslight._checks._base import Check, Evidence, Violation, observe, observer_class
from chaoslight._runtime import active
from chaoslight._runtime._frames import LIBRARIES, is_program
from chaoslight._schedule import LIGHTNING_HOOKS, LIGHTNING_STEPS, LOOP_SITES, SITES

# Observing DDP's gradient all-reduce registers a comm hook, which changes DDP's averaging
# arithmetic at odd world sizes: the baseline must not perturb the run it measures.
UNOBSERVED = frozenset({"dist.gradient_allreduce"})
MAX_PATHS = 16  # distinct call paths recorded per site


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


class CallPaths:
    """Put on the engine as its tracer for the baseline run: at each site call, the
    program's own frames on the call path (file, line), innermost first, so the search can
    read the handlers around each site (``_search/_caught.py``). A tracer already there
    (``inject(trace=True)``) still gets every call."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.paths: dict[str, set[tuple[tuple[str, int], ...]]] = {}
        self.modules: dict[str, list[str]] = {}  # file -> [module name, package]
        self._program: dict[str, bool] = {}

    def enter(self, site: str, rank: int, step: int | None, call: int) -> None:
        if self.inner is not None:
            self.inner.enter(site, rank, step, call)
        known = self.paths.setdefault(site, set())
        if len(known) >= MAX_PATHS:
            return
        path = []
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            file = frame.f_code.co_filename
            own = self._program.get(file)
            if own is None:
                own = self._program[file] = is_program(file)
                if own:
                    names = frame.f_globals
                    self.modules[file] = [
                        names.get("__name__") or "",
                        names.get("__package__") or "",
                    ]
            if own:
                path.append((file, frame.f_lineno or 0))
            frame = frame.f_back
        if path:
            known.add(tuple(path))

    def exit(self, site: str, rank: int, step: int | None, call: int) -> None:
        if self.inner is not None:
            self.inner.exit(site, rank, step, call)

    def facts(self) -> dict[str, Any]:
        paths = {
            site: [list(map(list, p)) for p in sorted(seen)]
            for site, seen in self.paths.items()
            if seen
        }
        return {"paths": paths, "modules": self.modules}


def _follow_paths(*args: Any) -> None:
    """Record the program's frames at each site call from now on (the baseline's paths)."""
    engine = _engine()
    if engine is not None and not isinstance(engine.tracer, CallPaths):
        engine.tracer = CallPaths(engine.tracer)


def _engine() -> Any:
    injection = active()
    return injection.engine if injection is not None else None


class ReachRecorder(Check):
    """Records, per rank, every site reached with its steps, and the user's own hooks."""

    name = "reach"
    sites = frozenset(SITES) - UNOBSERVED

    def observer(self) -> Any:
        check = self

        def setup(self: Any, trainer: Any, module: Any, stage: str) -> None:
            _follow_paths()

        def on_fit_end(self: Any, trainer: Any, module: Any) -> None:
            engine = _engine()
            if engine is None:
                return
            # Lightning's own sites stand for the loop's: its backward, optimizer step and
            # batch fetch are drawn there, at the Trainer's steps.
            steps = {
                site: seen
                for site, seen in engine.counts().steps_seen.items()
                if seen and site not in LOOP_SITES
            }
            user = user_sites(module, list(trainer.callbacks), trainer.datamodule)
            record(engine, trainer, steps, user)

        def on_loop_end(self: Any) -> None:
            """A run that no Trainer ran: the program's own loop. The Fabric calls it made
            are its own code, as a Trainer program's hooks are."""
            engine = _engine()
            if engine is None:
                return
            steps = {site: seen for site, seen in engine.counts().steps_seen.items() if seen}
            user = sorted(site for site in steps if site.startswith("fabric."))
            record(engine, None, steps, user, loop=True)

        def record(
            engine: Any, trainer: Any, steps: dict[str, Any], user: list[str], loop: bool = False
        ) -> None:
            facts: dict[str, Any] = {"steps": steps, "user": user, "loop": loop}
            if isinstance(engine.tracer, CallPaths):
                facts.update(engine.tracer.facts())
            observe(check.name, trainer, facts)

        def teardown(self: Any, trainer: Any, module: Any, stage: str) -> None:
            engine = _engine()
            if engine is not None and isinstance(engine.tracer, CallPaths):
                engine.tracer = engine.tracer.inner

        hooks = {
            "setup": setup,
            "on_fit_end": on_fit_end,
            "teardown": teardown,
            "on_run_start": _follow_paths,
            "on_loop_end": on_loop_end,
        }
        return observer_class("ReachObserver", hooks)()

    def judge(self, evidence: Evidence) -> list[Violation]:
        return []
