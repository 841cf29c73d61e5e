"""Which frames are the user's: not torch, Lightning, chaoslight, wrapt or the stdlib.

A leaf module (no chaoslight import), so the watchdog's stack snapshots and the memory
budget's OOM report name the user's line the same way.
"""

from __future__ import annotations

import functools
import gc
import importlib.util
import os
import sys
import sysconfig
import threading
from types import FrameType

LIBRARIES = (
    "torch",
    "lightning",
    "pytorch_lightning",
    "lightning_fabric",
    "lightning_utilities",
    "torchmetrics",
    "chaoslight",
    "wrapt",
)


@functools.cache
def _roots() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    libraries: list[str] = []
    for name in LIBRARIES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations:
            libraries += [os.path.abspath(p) for p in spec.submodule_search_locations]
    paths = sysconfig.get_paths()
    stdlib = tuple({os.path.abspath(paths[k]) for k in ("stdlib", "platstdlib")})
    installed = tuple({os.path.abspath(paths[k]) for k in ("purelib", "platlib")})
    return tuple(libraries), stdlib, installed


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == root or path.startswith(root + os.sep) for root in roots)


def is_library(filename: str) -> bool:
    """True for torch, Lightning, chaoslight, wrapt and the standard library's files."""
    if filename.startswith("<"):
        return True
    libraries, stdlib, installed = _roots()
    path = os.path.abspath(filename)
    return _under(path, libraries) or (_under(path, stdlib) and not _under(path, installed))


def user_frame(frame: FrameType | None) -> FrameType | None:
    """The innermost frame whose file is user code (not a library, see ``is_library``)."""
    while frame is not None and is_library(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


# torch's operator dispatch: the frames between a Python caller of an op and its kernel
# (``OpOverload.__call__``/``redispatch``, a custom op's autograd glue). A functional
# collective (DTensor's redistribution, FSDP2's state-dict gathering) waits in the op
# ``wait_tensor``: its innermost frames are these, the torch.distributed caller just out.
_OP_DISPATCH = (f"{os.sep}torch{os.sep}_ops.py", f"{os.sep}torch{os.sep}_library{os.sep}")


def in_op_dispatch(filename: str) -> bool:
    """Whether a frame's file is torch's operator dispatch (``_OP_DISPATCH``)."""
    return any(part in filename for part in _OP_DISPATCH)


def past_op_dispatch(frame: FrameType | None) -> FrameType | None:
    """The innermost frame outside torch's operator dispatch: the op's caller."""
    while frame is not None and in_op_dispatch(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def is_program(filename: str) -> bool:
    """True for the program's own files: neither a library (``is_library``) nor anything
    installed (site-packages: tqdm's monitor, a logger's writer thread)."""
    if is_library(filename):
        return False
    _, _, installed = _roots()
    return not _under(os.path.abspath(filename), installed)


def runs_program_code(frame: FrameType | None) -> bool:
    """Whether a thread whose innermost frame is ``frame`` is inside the program's code
    (a frame of it anywhere on the stack: an export the program started, now sleeping in
    a delay chaoslight injected, counts)."""
    while frame is not None:
        if is_program(frame.f_code.co_filename):
            return True
        frame = frame.f_back
    return False


_FRAMES_LOCK = threading.Lock()


def current_frames() -> dict[int, FrameType]:
    """``sys._current_frames()`` with the garbage collector held off. CPython 3.11 builds
    its dict while holding the interpreter's thread-list lock; a collection that starts
    on that allocation may free a ``threading.local``, whose cleanup takes the same lock,
    and the process deadlocks for good (seen in a test run: ``_PyThread_CurrentFrames`` →
    ``gc_collect_main`` → lock). One caller at a time, so each puts back what it found."""
    with _FRAMES_LOCK:
        enabled = gc.isenabled()
        gc.disable()
        try:
            return sys._current_frames()
        finally:
            if enabled:
                gc.enable()
