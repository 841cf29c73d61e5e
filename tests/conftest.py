"""Shared fixtures: a single-process gloo group, the session's Worlds, and guards that no
test leaks an injection or a change to the process (signal handlers, faulthandler, the
environment, the working directory, a thread, a child process)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# What importing Lightning does to the process (it sets PYTORCH_NVML_BASED_CUDA_CHECK and
# TORCHINDUCTOR_CACHE_DIR) happens now, not in whichever test imports it first.
import lightning.pytorch  # noqa: F401
import pytest
import pytorch_lightning  # noqa: F401
from _pytest.faulthandler import fault_handler_stderr_fd_key
from hypothesis import HealthCheck, settings

# ``from helpers import ...`` works whether or not tests/ is a package.
sys.path.insert(0, str(Path(__file__).parent))

from process_state import ProcessState, SignalState

# Entering inject() the first time imports Lightning: no per-example deadline.
settings.register_profile(
    "chaoslight",
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "chaoslight"))

# Variables Lightning's DDP launcher sets in os.environ (and it sets torch's thread count
# with OMP_NUM_THREADS); LOCAL_RANK would change the rank chaoslight reads in later tests,
# and subprocesses inherit them all, so tests that run DDP get them restored.
LAUNCHER_VARIABLES = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "NODE_RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "OMP_NUM_THREADS",
)
LIGHTNING_SEED_VARIABLES = ("PL_GLOBAL_SEED", "PL_SEED_WORKERS")  # seed_everything's
RANK_VARIABLES = ("RANK", "SLURM_PROCID", "LOCAL_RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK")


def pytest_configure(config: pytest.Config) -> None:
    """The suite run as a script's background job starts with SIGINT ignored (a shell
    without job control does that to ``cmd &``), and every process it starts inherits
    SIG_IGN: the Ctrl-C tests' commands would ignore the SIGINT they are sent. Tests run
    as a terminal's command does, with Python's own Ctrl-C handler."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (pyproject's addopts): a worker per core this process may use, at most
    four. A test's World adds two or three busy rank processes of its own, so more workers
    than cores only slow every hang verdict's clock."""
    usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else ()
    return max(1, min(4, len(usable) or os.cpu_count() or 1))


@pytest.fixture(autouse=True)
def _no_leaked_process_state(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test leaves its process as it found it (``process_state``): signal handlers in
    Python and in C, faulthandler, the blocked signals, the environment, the working
    directory, no non-daemon thread or child process of its own still running. A leak
    fails the test that made it and is put back, so the next test does not inherit it."""
    before = ProcessState()
    yield
    leaks = before.leaks(request.config.stash.get(fault_handler_stderr_fd_key, None))
    assert not leaks, "the test changed the process and left it so:\n  " + "\n  ".join(leaks)


@pytest.fixture
def lightning_in_process() -> Iterator[None]:
    """For a test that trains in this process: what Lightning and torch change there, put
    back. Lightning's signal connector, tearing down, sets every signal's handler in C back
    to what Python knew (faulthandler's and readline's go); ``seed_everything`` sets
    PL_GLOBAL_SEED and PL_SEED_WORKERS; a DataLoader with workers sets torch's SIGCHLD
    handler for good."""
    seeds = {name: os.environ.get(name) for name in LIGHTNING_SEED_VARIABLES}
    before = SignalState()
    yield
    before.put_back_frameworks()
    for name, value in seeds.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(autouse=True)
def _no_leaked_injection() -> Iterator[None]:
    """Every test leaves no active injection behind (and a leak does not cascade)."""
    from chaoslight import _sites
    from chaoslight._runtime import _inject as _runtime

    yield
    leaked = _runtime.active()
    if leaked is not None:
        leaked.__exit__(None, None, None)
    assert leaked is None, "the test left an inject() active"
    assert _sites.STATE.dispatcher is None, "the test left a dispatcher installed"


@pytest.fixture
def rank_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No launcher rank variables set, so chaoslight reads rank 0 unless a test sets RANK."""
    for name in RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def gloo_group(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """A one-rank gloo process group on a HashStore, destroyed after the test.

    Lightning's DDP launcher writes its variables into os.environ and sets torch's
    thread count; both are put back.
    """
    import torch
    import torch.distributed as dist

    for name in LAUNCHER_VARIABLES:
        monkeypatch.setenv(name, os.environ.get(name, "0"))
        monkeypatch.delenv(name)
    monkeypatch.setenv("RANK", "0")
    assert not dist.is_initialized()
    threads = torch.get_num_threads()
    dist.init_process_group("gloo", world_size=1, rank=0, store=dist.HashStore())
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()
        torch.set_num_threads(threads)


DDP_TARGETS = f"{Path(__file__).resolve().parent}/ddp_targets.py"


def ddp_target(name: str) -> str:
    """A target from tests/ddp_targets.py, by absolute path."""
    return f"{DDP_TARGETS}:{name}"


@pytest.fixture(scope="session")
def world2() -> Iterator[Any]:
    """One 2-rank World shared by the multi-rank fault and check tests."""
    from chaoslight import World

    with World(size=2) as world:
        yield world


@pytest.fixture(scope="session")
def world3() -> Iterator[Any]:
    """One 3-rank World shared by the tests that need a third rank (no spare: they crash none)."""
    from chaoslight import World

    with World(size=3, spares=0) as world:
        yield world


@pytest.fixture
def lend_world2(world2: Any, monkeypatch: pytest.MonkeyPatch) -> Callable[[Any], None]:
    """Have a module's ``World(size=2)`` lend the session's World (left open): a command
    run in this process skips the seconds a new World spends importing."""

    @contextmanager
    def lend(size: int = 2) -> Iterator[Any]:
        assert size == world2.size, f"lend_world2 lends a 2-rank World, not size={size}"
        yield world2

    def patch(module: Any) -> None:
        monkeypatch.setattr(module, "World", lend)

    return patch
