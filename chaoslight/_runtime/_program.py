"""Which program an in-process run ran: the key its fault-free references are kept by.

A World's example names its program: the target (``file.py:function``). Under
``inject()`` or a ``ChaosCallback`` nothing does, and one check object may judge many
programs in one process (a module-level list of checks in a test suite, the pytest
plugin's ``chaos`` fixture). A check that compares a run with the program's fault-free
runs must never take another program's for them: that is a false alarm.

``program_probe`` is a callback that ``inject`` attaches beside the checks' observers;
when the Trainer sets up, it writes down what runs:

- the program's own frames on the stack (neither a library's nor an installed
  package's, so not pytest's: the function that built the Trainer, the helper that
  called it, the test), each by file, qualified name and first line, with its file's
  size and modification time (a file edited since is another program);
- the LightningModule's class and a digest of its layers, each one's name, class and
  settings, as its ``repr`` shows them (``Dropout(p=0.5)`` is not ``Dropout(p=0.0)``);
- the pytest test running it (``PYTEST_CURRENT_TEST``, its phase left out): the cases
  of a parametrized test are programs of their own.

Where no Trainer ran in the block, the program's frames where ``inject()`` was entered
stand in.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
from contextlib import nullcontext
from types import FrameType
from typing import Any

from chaoslight._runtime._context import callback_bases
from chaoslight._runtime._frames import is_program
from chaoslight._sites import STATE


def source_stamp(path: str) -> str:
    """A file's size and modification time (``-`` when it cannot be read): another value
    once the file is edited."""
    try:
        status = os.stat(path)
    except OSError:
        return "-"
    return f"{status.st_size}:{status.st_mtime_ns}"


def program_frames(frame: FrameType | None) -> tuple[str, ...]:
    """The program's own frames from ``frame`` outwards: file, qualified name, first
    line and the file's stamp of each."""
    found = []
    while frame is not None:
        code = frame.f_code
        if is_program(code.co_filename):
            name = getattr(code, "co_qualname", code.co_name)  # Python 3.11+
            stamp = source_stamp(code.co_filename)
            found.append(f"{code.co_filename}:{name}:{code.co_firstlineno}@{stamp}")
        frame = frame.f_back
    return tuple(found)


def current_test() -> str:
    """The pytest test running now (``path::name[case]``), or ``""`` outside pytest."""
    running = os.environ.get("PYTEST_CURRENT_TEST", "")
    return running.rpartition(" (")[0] or running  # "... (call)": the phase is not the test


def model_digest(module: Any) -> str:
    """The model's class and a digest of its layers: each submodule's name, class and
    settings (``extra_repr``: ``p=0.5`` of a ``Dropout``), what its ``repr`` shows."""
    kind = type(module)
    named = getattr(module, "named_modules", None)
    layers = [
        f"{name}:{type(layer).__qualname__}({layer.extra_repr()})"
        for name, layer in (named() if callable(named) else ())
    ]
    digest = hashlib.sha1("\n".join(layers).encode(errors="replace")).hexdigest()[:16]
    return f"{kind.__module__}.{kind.__qualname__} {digest}"


class _ProgramProbe:
    """Writes down the program at the first hook of the first Trainer it is attached to."""

    def __init__(self, entered: tuple[str, ...]) -> None:
        self._test = current_test()
        self._entered = entered  # the frames where inject() was entered
        self._seen: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """What identifies the program: one line per part."""
        return "\n".join((self._test, *(self._seen or self._entered)))

    def _saw(self, module: Any) -> None:
        if self._seen:
            return
        engine = STATE.dispatcher  # chaoslight's own calls: a layer's settings may be a tensor's
        with engine.internal() if engine is not None else nullcontext():
            model = model_digest(module)
        self._seen = (model, *program_frames(sys._getframe(1)))

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._saw(pl_module)

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self._saw(pl_module)

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._saw(pl_module)

    def on_test_start(self, trainer: Any, pl_module: Any) -> None:
        self._saw(pl_module)

    def on_predict_start(self, trainer: Any, pl_module: Any) -> None:
        self._saw(pl_module)


@functools.cache
def _probe_class() -> type:
    bases = tuple(b for b in callback_bases() if b is not object)
    return type("ProgramProbe", (_ProgramProbe, *bases), {"__module__": __name__})


def program_probe(entered: FrameType | None) -> Any:
    """A callback that identifies the program a Trainer runs (its ``key``); ``entered``
    is the frame that entered ``inject()``."""
    return _probe_class()(program_frames(entered))
