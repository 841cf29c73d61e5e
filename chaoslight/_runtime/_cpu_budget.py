"""A memory budget on the CPU counted by an allocator: ``cpu_budget.cpp``, built on first use.

torch hands out CPU memory through one replaceable allocator (``c10::SetCPUAllocator``).
Under a budget chaoslight puts a counting allocator in front of it: each allocation of at
least ``min_tracked_bytes`` that the thread which entered ``inject()`` makes counts until
it is freed, and one that would go over is refused with torch's own
``torch.OutOfMemoryError``, raised at the allocation, whose message this module writes
(the rank, the step, the program's line). It is what a device's allocator does, so it
counts what a card would: every storage an op makes *and* the temporaries inside ops, a
storage grown in place, what ``torch.load`` reads; never a view. Nothing of Python runs on
an allocation that fits, so a budget costs next to nothing (``docs/explanation/performance.md``).

The allocator is C++: it is compiled once per torch and compiler into chaoslight's cache
(``$XDG_CACHE_HOME/chaoslight``, else ``~/.cache/chaoslight``; about a second) with the
machine's C++ compiler (``$CXX``, else ``c++`` or ``g++``) against the installed torch's
headers, and loaded with ctypes. Where that cannot be done (no compiler, a torch without
headers, a cache another user could write) the budget falls back to the dispatch mode
(``_dispatch_budget``), which sees ops from Python: slower, and it counts only the
storages ops return. ``CHAOSLIGHT_CPU_BUDGET=ops`` asks for that mode; ``allocator``
(the default) for this one. ``how_counted()`` says which a process gets and why.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from chaoslight._runtime._dispatch_budget import (
    budget_oom,
    forked_by_dataloader,
    stop_watching,
    watch_allocations,
)
from chaoslight._runtime._engine import Engine

SOURCE = Path(__file__).with_name("cpu_budget.cpp")
MECHANISM_VARIABLE = "CHAOSLIGHT_CPU_BUDGET"
ALLOCATOR, OPS = "allocator", "ops"
COUNTED_HERE = "counted by chaoslight's CPU allocator"  # in the allocator's OOM message
BUILD_TIMEOUT_S = 120.0

# int64_t (*)(int64_t nbytes, int64_t used, int64_t limit, char* buffer, int64_t capacity)
_REFUSAL = ctypes.CFUNCTYPE(
    ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64
)


class CpuCounter:
    """The loaded allocator: one per process. ``start`` a budget on the calling thread,
    ``stop`` it; ``paused()`` around chaoslight's own allocations; ``used()`` its bytes."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self._lib = library
        library.chaoslight_install.restype = ctypes.c_int
        library.chaoslight_installed.restype = ctypes.c_int
        library.chaoslight_start.argtypes = [ctypes.c_int64, ctypes.c_int64, _REFUSAL]
        library.chaoslight_count_this_thread.argtypes = [ctypes.c_int]
        library.chaoslight_set_extra.argtypes = [ctypes.c_int64]
        library.chaoslight_used.restype = ctypes.c_int64
        self._refusal: Any = None  # the ctypes callback: alive while the C++ side holds it

    def start(self, limit: int, min_bytes: int, refuse: Callable[[int, int, int], str]) -> bool:
        """Count this thread's allocations against ``limit``; False if torch would not take
        the allocator (another holds the CPU at a higher priority)."""
        if not self._lib.chaoslight_install():
            return False

        def write(nbytes: int, used: int, cap: int, buffer: int, capacity: int) -> int:
            try:
                text = refuse(nbytes, used, cap).encode("utf-8", "replace")[: capacity - 1]
            except BaseException:  # C++ is below: it writes its own words
                return 0
            ctypes.memmove(buffer, text, len(text))
            return len(text)

        self._refusal = _REFUSAL(write)
        self._lib.chaoslight_start(limit, min_bytes, self._refusal)
        self._lib.chaoslight_count_this_thread(1)
        return True

    def stop(self) -> None:
        """Count nothing more and give torch its allocator back (unless another replaced
        ours since: theirs stays, ours passes every allocation through)."""
        self._lib.chaoslight_stop()
        self._lib.chaoslight_count_this_thread(0)
        self._lib.chaoslight_uninstall()

    def stop_in_child(self) -> None:
        """In a forked DataLoader worker: count nothing (the worker's memory is not the
        rank's device), leaving the allocator in place for the storages it inherited."""
        self._lib.chaoslight_stop()

    def pause(self) -> None:
        self._lib.chaoslight_pause()

    def resume(self) -> None:
        self._lib.chaoslight_resume()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        self.pause()
        try:
            yield
        finally:
            self.resume()

    def used(self) -> int:
        return int(self._lib.chaoslight_used())

    def installed(self) -> bool:
        """Whether torch's CPU allocator is this one now."""
        return bool(self._lib.chaoslight_installed())

    def set_extra(self, nbytes: int) -> None:
        """What the ledger counts besides the allocations (``Allocate`` holds)."""
        self._lib.chaoslight_set_extra(nbytes)


def how_counted() -> tuple[str, str]:
    """``(ALLOCATOR, "")``, or ``(OPS, why)``: how a CPU budget is counted in this process."""
    loaded = _load()
    if isinstance(loaded, CpuCounter):
        return ALLOCATOR, ""
    return OPS, loaded


def replay_note(reason: str) -> str | None:
    """What to tell the replay of a failure whose budget ran out (``reason`` names the
    budget's OOM) when this machine counts a CPU budget another way than the run did."""
    if "MemoryBudget on rank" not in reason:
        return None
    then = ALLOCATOR if COUNTED_HERE in reason else OPS
    now, why = how_counted()
    if then == now:
        return None
    if then == OPS:
        return (
            "this failure's budget was counted by ops (the dispatch mode); here it is counted "
            f"by chaoslight's CPU allocator, which also counts temporaries: set "
            f"{MECHANISM_VARIABLE}={OPS} to count as the run did"
        )
    return (
        f"this failure's budget was {COUNTED_HERE}; here it is counted by ops ({why}): near "
        "the limit the two differ, and the replay may not fail the same way"
    )


def counter() -> CpuCounter | None:
    """This process's counting allocator, built and loaded on first use; None where the
    budget is counted by the dispatch mode instead (``how_counted`` says why)."""
    loaded = _load()
    return loaded if isinstance(loaded, CpuCounter) else None


def prebuild() -> None:
    """Build and load the allocator now, once (a World, before its ranks run a budget: each
    would otherwise build it inside its example's time). Installs nothing."""
    _load()


@functools.cache
def _load() -> CpuCounter | str:
    wanted = os.environ.get(MECHANISM_VARIABLE, ALLOCATOR).strip().lower() or ALLOCATOR
    if wanted == OPS:
        return f"{MECHANISM_VARIABLE}={OPS} asks for it"
    if wanted != ALLOCATOR:
        return f"{MECHANISM_VARIABLE}={wanted!r} is neither {ALLOCATOR!r} nor {OPS!r}"
    try:
        path = library_path()
        if not path.exists():
            build(path)
        _check_private(path.parent)
        _check_private(path)
        return CpuCounter(ctypes.CDLL(str(path)))
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        return f"chaoslight's CPU allocator could not be built or loaded: {exc}"


def library_path() -> Path:
    """Where the built allocator lives: named by what it was built from and with."""
    import torch

    key = "\n".join(
        (
            SOURCE.read_text(),
            torch.__version__,
            os.path.dirname(torch.__file__),
            str(torch._C._GLIBCXX_USE_CXX11_ABI),
            _compiler(),
            sys.platform,
        )
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return _cache_dir() / f"cpu_budget-{digest}.so"


def build(path: Path) -> None:
    """Compile ``cpu_budget.cpp`` into ``path`` (written whole or not at all: ranks that
    build at once each rename a finished file into place)."""
    import torch

    root = Path(torch.__file__).parent
    if not (root / "include" / "c10" / "core" / "CPUAllocator.h").exists():
        raise RuntimeError(f"torch at {root} has no C++ headers")
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    _check_private(path.parent)
    fd, partial = tempfile.mkstemp(dir=path.parent, suffix=".so.partial")
    os.close(fd)
    command = [
        _compiler(),
        "-O2",
        "-shared",
        "-fPIC",
        "-std=c++17",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        f"-I{root / 'include'}",
        str(SOURCE),
        f"-L{root / 'lib'}",
        "-lc10",
        f"-Wl,-rpath,{root / 'lib'}",
        "-o",
        partial,
    ]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
        )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"{command[0]} exited {done.returncode}: {last}")
        os.replace(partial, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)


def _compiler() -> str:
    for name in (os.environ.get("CXX", ""), "c++", "g++", "clang++"):
        if name and (found := shutil.which(name)):
            return found
    raise RuntimeError("no C++ compiler ($CXX, c++, g++ or clang++) on PATH")


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "chaoslight"


def _check_private(path: Path) -> None:
    """Code is loaded from here: refuse a file or folder another user owns or may write."""
    info = path.stat()
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise RuntimeError(f"{path} is not private to this user: not loading code from it")


# -- a budget for one inject() -----------------------------------------------------------

# Budgets counting in this process: a forked DataLoader worker stops them.
_COUNTING: weakref.WeakSet[AllocatorWatch] = weakref.WeakSet()


class AllocatorWatch:
    """An ``inject()``'s budget counted by the allocator on the thread that entered it: the
    ledger's holds count beside it, and chaoslight's own calls (``Engine.internal()``) are
    not counted."""

    def __init__(self, engine: Engine, allocator: CpuCounter) -> None:
        self.engine = engine
        self.allocator = allocator
        self.counting = False

    def start(self) -> bool:
        budget = self.engine.ledger.budget
        assert budget is not None, "an AllocatorWatch needs a budget"
        if not self.allocator.start(budget.limit_bytes, budget.min_tracked_bytes, self._words):
            return False
        self.counting = True
        ledger = self.engine.ledger
        ledger.allocator = self.allocator
        self.allocator.set_extra(ledger.used)
        self.engine.quiet_allocations = (self.allocator.pause, self.allocator.resume)
        _COUNTING.add(self)
        return True

    def close(self) -> None:
        if not self.counting:
            return
        self.counting = False
        _COUNTING.discard(self)
        self.allocator.stop()
        self.engine.ledger.allocator = None
        self.engine.quiet_allocations = None

    def _words(self, nbytes: int, used: int, limit: int) -> str:
        """The refused allocation's OOM message: the dispatch mode's, less the op."""
        return str(budget_oom(self.engine, "an allocation", nbytes, used, limit, COUNTED_HERE))


def watch_budget(engine: Engine) -> Any:
    """Start counting ``engine``'s budget on this thread: by the allocator where it loads,
    else by the dispatch mode; None without a budget. ``stop_budget`` ends either."""
    if engine.ledger.budget is None:
        return None
    allocator = counter()
    if allocator is not None:
        watch = AllocatorWatch(engine, allocator)
        if watch.start():
            return watch
    return watch_allocations(engine)


def stop_budget(watch: Any) -> None:
    if isinstance(watch, AllocatorWatch):
        watch.close()
    else:
        stop_watching(watch)


def _stop_in_forked_child() -> None:
    """A DataLoader worker's memory is not the rank's device: it counts nothing."""
    if _COUNTING and forked_by_dataloader():
        for watch in list(_COUNTING):
            watch.counting = False
            watch.allocator.stop_in_child()
        _COUNTING.clear()


os.register_at_fork(after_in_child=_stop_in_forked_child)
