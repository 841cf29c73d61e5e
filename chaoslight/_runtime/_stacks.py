"""Where a rank is: the site it is in, the user-code frame that called it, every stack.

``snapshot()`` builds a ``Position`` from the active engine (the sites in progress and
their call numbers) and the main thread's innermost user-code frame; ``dump_stacks``
keeps every thread's Python stack (faulthandler). The watchdog and the World's hang
evidence are built from these.
"""

from __future__ import annotations

import faulthandler
import linecache
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaoslight._runtime._context import current_rank
from chaoslight._runtime._frames import current_frames, user_frame
from chaoslight._runtime._inject import active
from chaoslight._runtime._loader_workers import worker_stacks
from chaoslight._schedule import SITES
from chaoslight._schedule._catalog import LOOP_SITES
from chaoslight._schedule._clip import clip

_STEPS = (
    "training_step",
    "validation_step",
    "test_step",
    "predict_step",
    "backward",
    "optimizer_step",
)


_BATCH_HOOKS = tuple(
    f"on_{stage}_batch_{edge}"
    for stage in ("train", "validation", "test", "predict")
    for edge in ("start", "end")
)


# The sites a watchdog watches for progress: every collective, the steps and batch hooks
# (a loop's: its backward, optimizer step and batches; in a Trainer program they pass
# through, Lightning's stand for them). DDP's gradient all-reduce is left out unless the
# schedule names it: observing it registers a Python comm hook, which changes DDP's
# averaging arithmetic at odd world sizes.
PROGRESS_SITES = frozenset(
    {s for s in SITES if s.startswith("dist.") and s != "dist.gradient_allreduce"}
    | {f"lightning.{name}" for name in _STEPS + _BATCH_HOOKS if f"lightning.{name}" in SITES}
    | LOOP_SITES
)


MAX_CODE = 90


@dataclass(frozen=True)
class Position:
    """Where a rank's main thread is: the sites it is inside and the user frame calling them."""

    rank: int
    idle_s: float
    sites: tuple[tuple[str, int, int | None], ...] = ()  # outermost first
    function: str | None = None
    filename: str | None = None
    lineno: int | None = None
    code: str | None = None
    inner: str | None = None  # the innermost frame, when it is library code: "fn, file.py:9"

    @property
    def site(self) -> str | None:
        return self.sites[-1][0] if self.sites else None

    def where(self) -> str:
        """``waits in dist.all_reduce #14 at step 3 (training_step → self.log(...), f.py:41)``."""
        if self.sites:
            site, call, step = self.sites[-1]
            verb = "waits in" if site.startswith("dist.") else "is in"
            text = f"{verb} {site} #{call}" + ("" if step is None else f" at step {step}")
        else:
            text = "is outside every site"
        if self.function is not None:
            caller = self.function + (f" → {self.code}" if self.code else "")
            text += f" ({caller}, {Path(self.filename or '?').name}:{self.lineno})"
        if self.inner and not (self.site or "").startswith("dist."):
            text += f" [innermost: {self.inner}]"
        return text

    def line(self) -> str:
        return f"rank {self.rank} {self.where()}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "idle_s": self.idle_s,
            "sites": [list(s) for s in self.sites],
            "function": self.function,
            "filename": self.filename,
            "lineno": self.lineno,
            "code": self.code,
            "inner": self.inner,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Position:
        sites = tuple((str(s), int(c), st) for s, c, st in doc.get("sites", ()))
        return cls(
            doc["rank"],
            doc["idle_s"],
            sites,
            doc.get("function"),
            doc.get("filename"),
            doc.get("lineno"),
            doc.get("code"),
            doc.get("inner"),
        )


@dataclass(frozen=True)
class HangReport:
    """What a watchdog saw when it fired: the position, the timeout, every thread's stack."""

    position: Position
    timeout: float
    stacks: str

    def line(self) -> str:
        return self.position.line()


# -- where the main thread is -------------------------------------------------------------
def active_engine() -> Any:
    injection = active()
    return injection.engine if injection is not None else None


def snapshot(thread_id: int | None = None, since: float | None = None) -> Position:
    """Where the main thread (or ``thread_id``) is now, from the active engine and its frame."""
    engine = active_engine()
    ident = thread_id if thread_id is not None else threading.main_thread().ident
    sites: tuple[tuple[str, int, int | None], ...] = (
        tuple(engine.in_progress_of(ident)) if engine is not None else ()
    )
    last = engine.last_activity if engine is not None else time.monotonic()
    idle = time.monotonic() - max(last, since or last)
    innermost = current_frames().get(ident or 0)
    frame = user_frame(innermost)
    inner = None
    if innermost is not None and innermost is not frame:
        inner = (
            f"{innermost.f_code.co_name}, {Path(innermost.f_code.co_filename).name}:"
            f"{innermost.f_lineno}"
        )
    if frame is None:
        return Position(current_rank(), idle, sites, inner=inner)
    filename, lineno = frame.f_code.co_filename, frame.f_lineno
    code = linecache.getline(filename, lineno).strip()
    code = clip(code, MAX_CODE)
    return Position(
        current_rank(), idle, sites, frame.f_code.co_name, filename, lineno, code or None, inner
    )


def hang_stacks(path: str | os.PathLike[str] | None = None) -> str:
    """A hang's evidence: every thread's stack (``dump_stacks``) and, where the main thread
    waits on a DataLoader's workers, theirs (``_loader_workers``, in a rank that armed it)."""
    return dump_stacks(path) + worker_stacks(threading.main_thread().ident)


def dump_stacks(path: str | os.PathLike[str] | None = None) -> str:
    """Every thread's Python stack, as faulthandler writes it (also to ``path`` if given)."""
    with tempfile.TemporaryFile("w+") as handle:
        faulthandler.dump_traceback(handle, all_threads=True)
        handle.seek(0)
        text = handle.read()
    if path is not None:
        Path(path).write_text(text)
    return text
