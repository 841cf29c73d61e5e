"""What one example may change in a rank process, and putting it back before the next.

The World reuses its rank processes example after example; an example must start from
the same state whatever ran before it (see ``Baseline``).
"""

from __future__ import annotations

import faulthandler
import os
import random
import signal
import sys
import tempfile
import threading
import time
import warnings

from chaoslight._runtime._frames import current_frames, runs_program_code

# How long a thread an example started may go on running the program's code after the
# example ended (an export finishing) before the rank process is retired: past that it
# would run, and write relative paths, inside the next example.
LEFTOVER_GRACE_S = 1.0


def threads_now() -> set[int]:
    """The idents of the threads alive now: what an example's leftovers are told from."""
    return {t.ident for t in threading.enumerate() if t.ident is not None}


def program_threads(before: set[int]) -> list[threading.Thread]:
    """The threads started since ``before`` that are alive and inside the program's code.
    A library's idle thread (tqdm's monitor, an executor waiting for work) is not one."""
    frames = current_frames()
    return [
        thread
        for thread in threading.enumerate()
        if thread.ident not in before
        and thread is not threading.current_thread()
        and runs_program_code(frames.get(thread.ident or -1))
    ]


def outlived(before: set[int], grace: float = LEFTOVER_GRACE_S) -> list[str]:
    """Give the program's leftover threads ``grace`` seconds to end (in the example's own
    directory, where their writes belong); the names of those still running then."""
    deadline = time.monotonic() + grace
    for thread in program_threads(before):
        thread.join(max(0.0, deadline - time.monotonic()))
    return [thread.name for thread in program_threads(before)]


# Handlers a target installs and may leave behind (Lightning's signal connector takes
# SIGTERM, and SIGUSR1 for SLURM requeue): the next example would run under them. The
# watchdog's SIGUSR2 is its own to manage.
RESTORED_SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)


class Baseline:
    """The process state a target may change, captured once and put back around each example:
    working directory, environment, tempfile's directory, warning filters, the handlers of
    ``RESTORED_SIGNALS`` and faulthandler's fatal-signal handlers, torch's default dtype,
    thread count, grad mode and determinism flag, and the torch, random and numpy RNG
    states (so an example's randomness does not depend on the examples before it)."""

    def __init__(self, idle: str | None = None) -> None:
        import torch

        # Between examples a rank waits in ``idle`` (the World's own folder), not where the
        # World was started: a thread an example left running that writes a relative path
        # (an export not waited for) writes there, never into the user's project.
        if idle is not None:
            os.makedirs(idle, exist_ok=True)
            os.chdir(idle)
        self.cwd = os.getcwd()
        self.dtype = torch.get_default_dtype()
        self.threads = torch.get_num_threads()
        self.grad = torch.is_grad_enabled()
        self.deterministic = torch.are_deterministic_algorithms_enabled()
        self.torch_rng = torch.get_rng_state()
        self.python_rng = random.getstate()
        numpy = sys.modules.get("numpy")  # imported by Lightning when it is installed
        self.numpy_rng = numpy.random.get_state() if numpy is not None else None
        self.filters = list(warnings.filters)
        # None: a handler set outside Python, which cannot be put back from here.
        self.handlers = {
            signum: handler
            for signum in RESTORED_SIGNALS
            if (handler := signal.getsignal(signum)) is not None
        }

    def enter(self, workdir: str) -> dict[str, str]:
        """Move into the example's fresh directory; return the environment to restore."""
        environ = dict(os.environ)
        os.chdir(workdir)
        os.environ["TMPDIR"] = workdir
        tempfile.tempdir = None
        self._reset_rng()
        return environ

    def restore(self, environ: dict[str, str]) -> None:
        import torch

        os.chdir(self.cwd)
        restore_environment(environ)
        tempfile.tempdir = None
        warnings.filters[:] = self.filters  # type: ignore[index]
        for signum, handler in self.handlers.items():
            if signal.getsignal(signum) is not handler:
                signal.signal(signum, handler)
        handling = sys.modules.get("torch.utils.data._utils.signal_handling")
        if handling is not None and getattr(handling, "_SIGCHLD_handler_set", False):
            # Lightning's teardown puts SIGCHLD back as it was when fit began (before the
            # DataLoader set torch's handler), yet torch remembers setting it and never
            # sets it again: a later example's dead DataLoader workers would go unseen,
            # where a fresh process (a real job) sees them.
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            setattr(handling, "_SIGCHLD_handler_set", False)  # noqa: B010 (torch private)
        if faulthandler.is_enabled():
            # Lightning's signal connector, tearing down, sets every signal it saw as
            # SIG_DFL back to SIG_DFL: that silently removes faulthandler's SIGABRT and
            # SIGSEGV handlers, and enable() alone is a no-op while faulthandler thinks it
            # is on. Re-armed, a rank that gloo aborts in a later example still leaves its
            # stacks in its log (the evidence that names Lightning's SIGTERM broadcast).
            faulthandler.disable()
            faulthandler.enable()
        if torch.get_default_dtype() != self.dtype:
            torch.set_default_dtype(self.dtype)
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        torch.set_grad_enabled(self.grad)
        if torch.are_deterministic_algorithms_enabled() != self.deterministic:
            torch.use_deterministic_algorithms(self.deterministic)

    def _reset_rng(self) -> None:
        import torch

        torch.set_rng_state(self.torch_rng)
        random.setstate(self.python_rng)
        if self.numpy_rng is not None:
            sys.modules["numpy"].random.set_state(self.numpy_rng)


def restore_environment(environ: dict[str, str]) -> None:
    """Make os.environ equal ``environ`` again, touching only the variables that differ."""
    for key in [k for k in os.environ if k not in environ]:
        del os.environ[key]
    for key, value in environ.items():
        if os.environ.get(key) != value:
            os.environ[key] = value
