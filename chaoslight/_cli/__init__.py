"""The ``chaoslight`` command: ``sites``, ``faults``, ``run``, ``fuzz``, ``check``, ``replay``,
``soak``.

Usage errors (bad flags, an unreadable or invalid schedule, an argument out of range)
print one line and exit 2, never a traceback. When the World's rank processes cannot
start (no such interpreter, a rank that dies before its handshake, a process group that
cannot form) the exit status is 4: the machine is at fault, not the call nor the
program. ``chaoslight run --help`` lists the statuses of ``run``.

Ctrl-C (SIGINT) ends any command within seconds, whatever it is waiting for: it says how
far it got, the World's processes and files go with it, and the exit status is 130.
Hypothesis keeps what it reads of local modules in a temporary folder, not in
``.hypothesis/`` of the current directory: a command writes only the files it names.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from hypothesis.configuration import set_hypothesis_home_dir, storage_directory

from chaoslight._cli import _catalogue, _check, _fuzz, _replay, _run, _soak
from chaoslight._cli._arguments import check_arguments
from chaoslight._cli._progress import reported
from chaoslight._cli._usage import (
    ENVIRONMENT_STATUS,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    USAGE_STATUS,
    Parser,
    UsageError,
)
from chaoslight._schedule import ChaosError
from chaoslight._world._slot import WorkersDidNotStart

__all__ = ["UsageError", "build_parser", "entry", "main"]

_REDELIVERY_S = 0.05  # how long after Python dropped a KeyboardInterrupt it is raised again


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="chaoslight", description="Deterministic chaos for Lightning training.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    commands.add_parser("sites", help="list the injection sites, one line each")
    commands.add_parser("faults", help="list the fault kinds, one line each")
    _run.add_command(commands)
    _fuzz.add_command(commands)
    _check.add_command(commands)
    _replay.add_command(commands)
    _soak.add_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    command = "chaoslight"
    try:
        args = build_parser().parse_args(argv)
        command = f"chaoslight {args.command}"
        check_arguments(args)
        with _interrupts_never_swallowed(), _hypothesis_storage():
            return _dispatch(args)
    except UsageError as exc:
        print(f"chaoslight: error: {exc}", file=sys.stderr)
        return exc.status
    except WorkersDidNotStart as exc:
        print(f"chaoslight: error: {exc}", file=sys.stderr)
        return ENVIRONMENT_STATUS
    except ChaosError as exc:
        print(f"chaoslight: error: {exc}", file=sys.stderr)
        return USAGE_STATUS
    except KeyboardInterrupt as exc:
        if not reported(exc):  # the progress display said how far it got
            print(f"{command}: interrupted (Ctrl-C)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # chaoslight's own bug: say so, keep the traceback for a report
        print(
            f"chaoslight: INTERNAL ERROR of chaoslight: {type(exc).__name__}: {exc} "
            "(not a finding about your program; please report it with the traceback below)",
            file=sys.stderr,
        )
        traceback.print_exc(file=sys.stderr)
        return EXIT_INTERNAL


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "sites":
        return _catalogue.print_sites()
    if args.command == "faults":
        return _catalogue.print_faults()
    if args.command == "fuzz":
        return _fuzz.fuzz_command(args)
    if args.command == "replay":
        return _replay.main(args)
    if args.command == "check":
        return _check.main(args)
    if args.command == "soak":
        return _soak.soak_command(args)
    return _run.run_command(args)


@contextmanager
def _interrupts_never_swallowed() -> Iterator[None]:
    """A Ctrl-C that Python had to drop is delivered again. Python raises KeyboardInterrupt
    wherever the main thread is when SIGINT lands; where that is a garbage collector's
    callback (Hypothesis installs one), a ``__del__`` or a weakref's callback, the exception
    is printed as "Exception ignored" and the command runs on as if no one had asked it to
    stop. Such exceptions go through ``sys.unraisablehook``: this one has SIGINT sent to
    the main thread again, from another thread once the hook has returned (sent from the
    hook itself, it would be raised inside the hook and dropped again), so the interrupt is
    raised at the main thread's next instruction or ends the wait it is blocked in."""
    previous = sys.unraisablehook
    main_thread = threading.main_thread().ident

    def redeliver(unraisable: sys.UnraisableHookArgs) -> None:
        if not isinstance(unraisable.exc_value, KeyboardInterrupt) or main_thread is None:
            previous(unraisable)
            return
        # Not printed: the Ctrl-C is not lost, and the command says it was interrupted.
        threading.Thread(target=_interrupt_later, args=(main_thread,), daemon=True).start()

    sys.unraisablehook = redeliver
    try:
        yield
    finally:
        sys.unraisablehook = previous


def _interrupt_later(thread: int) -> None:
    time.sleep(_REDELIVERY_S)  # the hook that started this has returned by then
    signal.pthread_kill(thread, signal.SIGINT)


@contextmanager
def _hypothesis_storage() -> Iterator[None]:
    """Hypothesis's own files (what it read of local modules) in a temporary folder, removed
    after: never ``.hypothesis/`` in the user's directory, which no command names
    (``--database`` is where a search is kept). Unless HYPOTHESIS_STORAGE_DIRECTORY names
    the folder, or Hypothesis was asked for its observations (they go where it puts them)."""
    asked = ("HYPOTHESIS_STORAGE_DIRECTORY", "HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY")
    if any(name.startswith(asked) for name in os.environ):
        yield
        return
    previous = storage_directory(intent_to_write=False).home_directory
    folder = tempfile.mkdtemp(prefix="chaoslight-hypothesis-")
    set_hypothesis_home_dir(folder)
    try:
        yield
    finally:
        set_hypothesis_home_dir(previous)
        _remove(folder)


def _remove(folder: str) -> None:
    """Remove ``folder`` even if Ctrl-C comes meanwhile (it is raised once it is gone)."""
    interrupted: KeyboardInterrupt | None = None
    while True:
        try:
            shutil.rmtree(folder, ignore_errors=True)
            break
        except KeyboardInterrupt as exc:
            interrupted = exc
    if interrupted is not None:
        raise interrupted


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
