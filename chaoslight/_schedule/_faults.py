"""Fault kinds: what happens, and the trigger that says where and when.

Pure data. Every fault is a frozen dataclass validated in its constructor, so a bad
schedule fails where it is written, with a message that names the field and value.

Each kind sets its traits (``_kind.py`` says what each means) and is registered by
``@fault_kind``. Adding a kind is its class here, its action in ``_runtime/_actions.py``
and its strategy in ``_search/_strategies.py``.
"""

from __future__ import annotations

import builtins
import signal as _signals  # the Crash class's accepted signals
from dataclasses import dataclass
from typing import Any, ClassVar

from chaoslight._schedule._catalog import REDUCTION, RESULT, SYNC
from chaoslight._schedule._data_faults import BadCheckpoint, DropBatch, Flip, RepeatBatch
from chaoslight._schedule._errors import InvalidArgument, suggest
from chaoslight._schedule._kind import (
    FAULT_KINDS,
    OFF_COLLECTIVES,
    SIMULATED_OOM_MARK,
    Fault,
    Severity,
    fault_kind,
)
from chaoslight._schedule._validate import (
    COUNT_WHY,
    MAX_COUNT,
    check_bool,
    check_bytes,
    check_choice,
    check_duration,
    check_int,
    check_optional_bounded_int,
    check_seconds,
)

__all__ = [  # the kinds, their parameters' choices, and the registry they are entered in
    "ABORTED_GROUP_MARK",
    "CORRUPT_VALUES",
    "DRAWN_ORDERS",
    "FAULT_KINDS",
    "FREEZE_HOWS",
    "MAX_DELAY_SECONDS",
    "MAX_FREEZE_S",
    "MAX_PREEMPT_AFTER_S",
    "OFF_COLLECTIVES",
    "OOM",
    "REORDER_ORDERS",
    "Allocate",
    "BadCheckpoint",
    "Corrupt",
    "Crash",
    "Delay",
    "DropBatch",
    "DropSync",
    "Fault",
    "Flip",
    "Freeze",
    "PgAbort",
    "Preempt",
    "Raise",
    "ReorderReduction",
    "RepeatBatch",
    "Severity",
    "fault_kind",
    "permutation",
]

# The reduction orders a backend itself may use, so a correct program must tolerate them:
# the orders a search draws. ``compressed`` (bf16 compression) is a configuration the
# program chooses, not an order the backend picks: valid in a schedule, never drawn.
DRAWN_ORDERS = ("reversed", "tree", "chunked", "premultiplied")
REORDER_ORDERS = (*DRAWN_ORDERS, "compressed")
CORRUPT_VALUES = ("nan", "inf", "-inf")
MAX_DELAY_SECONDS = 3600.0


@fault_kind
@dataclass(frozen=True)
class Delay(Fault):
    """A straggler: sleep ``seconds`` before the wrapped call."""

    kind: ClassVar[str] = "delay"
    severity: ClassVar[Severity] = Severity.BENIGN
    drawn_by_default: ClassVar[bool] = True
    simplicity: ClassVar[int] = 0
    seconds: float = 0.1

    def _validate(self) -> None:
        check_duration("seconds", self.seconds, MAX_DELAY_SECONDS)


@fault_kind
@dataclass(frozen=True)
class OOM(Fault):
    """Raise ``torch.OutOfMemoryError`` shaped like a real CUDA OOM.

    ``deferred=True`` raises it at the next sync point instead (``cuda.synchronize``,
    ``Tensor.item``/``tolist``, ``dist.barrier``), as CUDA reports async errors late.
    """

    kind: ClassVar[str] = "oom"
    aborts_call: ClassVar[bool] = True
    catchable: ClassVar[bool] = True
    drawn_by_default: ClassVar[bool] = True
    simplicity: ClassVar[int] = 2
    drawn_at: ClassVar[str | None] = OFF_COLLECTIVES
    nbytes: int = 2**30
    deferred: bool = False

    def _validate(self) -> None:
        check_bytes("nbytes", self.nbytes)
        check_bool("deferred", self.deferred)

    def aborts(self) -> bool:
        return not self.deferred

    def surfaced_in(self, error_text: str) -> bool:
        return SIMULATED_OOM_MARK in error_text


# An allocation at most this large, with no memory budget, cannot make a run fail: the
# real memory it holds is far below what any device that trains has to spare.
HARMLESS_BYTES = 64 * 2**20


@fault_kind
@dataclass(frozen=True)
class Allocate(Fault):
    """Hold ``nbytes`` of real memory on the rank's device for ``hold_steps`` steps.

    Under a ``MemoryBudget`` an allocation that would go over raises the simulated OOM.
    ``hold_steps=None`` holds it until injection ends.
    """

    kind: ClassVar[str] = "allocate"
    drawn_by_default: ClassVar[bool] = True
    simplicity: ClassVar[int] = 6
    nbytes: int = 2**20
    hold_steps: int | None = 1

    def _validate(self) -> None:
        check_bytes("nbytes", self.nbytes)
        check_optional_bounded_int("hold_steps", self.hold_steps, 1, MAX_COUNT, COUNT_WHY)

    def fault_class(self, budget: Any = None) -> Severity:
        # Without a budget nothing simulates an OOM: the real memory held can fail only
        # on a device already at its limit, and not at all when it is this small. So the
        # program has nothing to fail by, or to swallow: as benign as a delay.
        if budget is None and self.nbytes <= HARMLESS_BYTES:
            return Severity.BENIGN
        return self.severity

    def surfaced_in(self, error_text: str) -> bool:
        # A budget's OOM when it went over, or a real one the memory held brought about.
        return SIMULATED_OOM_MARK in error_text or "out of memory" in error_text.lower()


@fault_kind
@dataclass(frozen=True)
class DropSync(Fault):
    """Skip a synchronisation: the wrapped barrier/collective/synchronize does nothing."""

    kind: ClassVar[str] = "drop_sync"
    needs: ClassVar[str | None] = SYNC
    severity: ClassVar[Severity] = Severity.DESYNC
    simplicity: ClassVar[int] = 3


@fault_kind
@dataclass(frozen=True)
class ReorderReduction(Fault):
    """Sum the ranks' contributions in another order, so results differ in the last bits.

    ``order`` is one of reversed, tree, chunked, premultiplied (divide each contribution
    by the world size, then sum), compressed (round each contribution to bfloat16 first,
    as DDP's bf16 compression hook does), or a permutation of ranks such as ``"2,0,1"``.
    At world size 2 only ``compressed`` changes bits: a + b is bitwise b + a, and
    scaling by 1/2 is exact. A search draws the orders a backend may pick
    (``DRAWN_ORDERS``), never ``compressed``: that is a configuration the program chooses.
    """

    kind: ClassVar[str] = "reorder"
    needs: ClassVar[str | None] = REDUCTION
    severity: ClassVar[Severity] = Severity.BENIGN
    drawn_by_default: ClassVar[bool] = True
    needs_peers: ClassVar[bool] = True  # one contribution has one order
    simplicity: ClassVar[int] = 7
    order: str = "reversed"

    def fault_class(self, budget: Any = None) -> Severity:
        # Every rank summing in one order is what backends do; one rank alone gets a
        # different sum, which no backend does.
        return Severity.BENIGN if self.rank is None else Severity.DESYNC

    def _validate(self) -> None:
        if isinstance(self.order, str) and self.order in REORDER_ORDERS:
            return
        if isinstance(self.order, str) and permutation(self.order) is not None:
            return
        raise InvalidArgument(
            f"order={self.order!r} must be one of {', '.join(REORDER_ORDERS)} or a permutation "
            'of ranks such as "1,0"' + suggest(str(self.order), REORDER_ORDERS)
        )


def permutation(order: str) -> tuple[int, ...] | None:
    """Parse ``"2,0,1"`` into a permutation of 0..n-1, or None if it is not one."""
    try:
        ranks = tuple(int(part) for part in order.split(","))
    except ValueError:
        return None
    return ranks if sorted(ranks) == list(range(len(ranks))) else None


@fault_kind
@dataclass(frozen=True)
class Raise(Fault):
    """Raise an exception at the site, e.g. ``Raise(OSError(28, "No space left"), site=...)``.

    ``exception`` is a builtin exception name, a ``module:QualName`` path, an exception
    class or instance; it is stored as a name plus JSON-compatible ``args``.
    """

    kind: ClassVar[str] = "raise"
    aborts_call: ClassVar[bool] = True
    catchable: ClassVar[bool] = True
    drawn_by_default: ClassVar[bool] = True
    simplicity: ClassVar[int] = 1
    drawn_at: ClassVar[str | None] = OFF_COLLECTIVES
    exception: Any = "RuntimeError"
    args: tuple[Any, ...] = ("injected by chaoslight",)

    def __post_init__(self) -> None:
        exc = self.exception
        if isinstance(exc, BaseException):
            object.__setattr__(self, "args", tuple(exc.args))
            exc = type(exc)
        if isinstance(exc, type) and issubclass(exc, BaseException):
            exc_type: type[BaseException] = exc
            name = (
                exc_type.__name__
                if vars(builtins).get(exc_type.__name__) is exc_type
                else f"{exc_type.__module__}:{exc_type.__qualname__}"
            )
            object.__setattr__(self, "exception", name)
        if isinstance(self.args, list):
            object.__setattr__(self, "args", tuple(self.args))
        super().__post_init__()

    def _validate(self) -> None:
        if not isinstance(self.exception, str) or not self.exception:
            raise InvalidArgument(
                f"exception={self.exception!r} must be an exception class, instance or name"
            )
        if ":" not in self.exception and not _is_builtin_exception(self.exception):
            raise InvalidArgument(
                f"exception={self.exception!r} is not a builtin exception; write "
                "'module:QualName' for others"
                + suggest(self.exception, [n for n in vars(builtins) if n[0].isupper()])
            )
        if not isinstance(self.args, tuple):
            raise InvalidArgument(
                f"args={self.args!r} must be a tuple or list of the exception's arguments, "
                f"e.g. args=(28, 'No space left on device')"
            )
        if not all(isinstance(a, (str, int, float, bool)) or a is None for a in self.args):
            raise InvalidArgument(f"args={self.args!r} must hold only str, int, float, bool, None")

    def surfaced_in(self, error_text: str) -> bool:
        name = self.exception.split(":")[-1].split(".")[-1]
        return name in error_text and all(str(arg) in error_text for arg in self.args)


def _is_builtin_exception(name: str) -> bool:
    obj = vars(builtins).get(name)
    return isinstance(obj, type) and issubclass(obj, BaseException)


@fault_kind
@dataclass(frozen=True)
class Corrupt(Fault):
    """Replace the tensor result at the site (the loss, an output, a reduced value) by NaN/Inf."""

    kind: ClassVar[str] = "corrupt"
    needs: ClassVar[str | None] = RESULT
    severity: ClassVar[Severity] = Severity.DESYNC
    simplicity: ClassVar[int] = 8
    value: str = "nan"

    def _validate(self) -> None:
        check_choice("value", self.value, CORRUPT_VALUES)


@fault_kind
@dataclass(frozen=True)
class Crash(Fault):
    """Kill this rank's process at the site, as a lost node does (SIGKILL by default).

    ``signal`` is one of the signals that end a process the way a crash does, by number
    (as this platform numbers them; on Linux): SIGKILL 9 (a lost node, the OOM killer),
    SIGTERM 15 (preemption, a scheduler's kill), SIGABRT 6 (an abort, a failed assert in
    native code), SIGSEGV 11 and SIGBUS 7 (a native crash). Others are refused: SIGINT
    is a ``KeyboardInterrupt``, not a crash; chaoslight's watchdog owns SIGUSR2; 0 sends
    nothing. A Crash kills the process it fires in, so ``inject()`` refuses it unless
    given ``allow_crash=True``: run crashes in a ``chaoslight.World``.

    SIGSEGV, SIGABRT and SIGBUS come as a native crash brings them (a read of address 0,
    ``abort()``, a page mapped past the end of its file), not as a signal sent: no Python
    handler turns them into an exception, faulthandler's dump is written where the
    program enabled it, and no core file is left (the rank's core limit is set to 0).
    """

    kind: ClassVar[str] = "crash"
    aborts_call: ClassVar[bool] = True
    kills_process: ClassVar[bool] = True
    drawn_by_default: ClassVar[bool] = True
    simplicity: ClassVar[int] = 4
    # Accepted signals, number -> name, in the order the error message lists them.
    SIGNALS: ClassVar[dict[int, str]] = {
        int(getattr(_signals, name)): name
        for name in ("SIGKILL", "SIGTERM", "SIGABRT", "SIGSEGV", "SIGBUS")
        if hasattr(_signals, name)
    }
    _WHY_NOT: ClassVar[dict[int, str]] = {
        int(_signals.SIGINT): " (SIGINT is a KeyboardInterrupt, not a crash)",
        int(getattr(_signals, "SIGUSR2", -1)): " (SIGUSR2 is chaoslight's watchdog interrupt)",
    }
    signal: int = 9

    def _validate(self) -> None:
        if isinstance(self.signal, bool) or not isinstance(self.signal, int):
            check_int("signal", self.signal, 0)  # raises the shared wrong-type message
        if self.signal not in self.SIGNALS:
            accepted = ", ".join(f"{name} {number}" for number, name in self.SIGNALS.items())
            why = self._WHY_NOT.get(self.signal, "")
            raise InvalidArgument(
                f"signal={self.signal} is not a crash signal{why}; accepted: {accepted}"
            )
        object.__setattr__(self, "signal", int(self.signal))  # signal.SIGTERM -> 15

    def surfaced_in(self, error_text: str) -> bool:
        return True  # its rank died of it: whatever it printed is the crash's

    def kills_with(self) -> int | None:
        return self.signal


MAX_PREEMPT_AFTER_S = 60.0


@fault_kind
@dataclass(frozen=True)
class Preempt(Fault):
    """A scheduler's preemption notice: SIGTERM to this rank, which goes on running.

    Unlike ``Crash(signal=15)`` the process is not expected to die at once: the handlers
    the program and Lightning installed run, and the rank's events keep being recorded.
    ``after`` delivers the signal that many seconds after the trigger, from another
    thread, as a notice arrives whatever the rank is doing (Python runs the handler when
    the main thread next runs bytecode: after a collective it is blocked in returns).
    ``rank=None`` delivers to every rank as it reaches the trigger (a whole job
    preempted); one rank alone is one node of a multi-node job; two faults at different
    steps or ``after`` values are the per-rank skew of a real notice. The World starts
    ranks as torchrun does, so a signal reaches exactly the ranks named (Lightning's own
    launcher would forward rank 0's to the others). ``inject()`` refuses it in-process
    unless given ``allow_crash=True``: a SIGTERM the program does not handle ends it.

    ``group=True`` signals the rank's whole process group, as SLURM and Kubernetes do:
    the rank *and its DataLoader workers* get the SIGTERM, sent from outside the group.
    Where the group is not the rank's own (it holds another rank or a launcher), only the
    rank and the processes it started are signalled, and the delivery note says so.
    """

    kind: ClassVar[str] = "preempt"
    acts_later: ClassVar[bool] = True
    kills_process: ClassVar[bool] = True  # unless the program handles SIGTERM
    drawn_by_default: ClassVar[bool] = True
    simplicity: ClassVar[int] = 5
    after: float = 0.0
    group: bool = False

    def _validate(self) -> None:
        why = "a notice later than that is a different trigger: use a later step"
        after = check_duration("after", self.after, MAX_PREEMPT_AFTER_S, why)
        object.__setattr__(self, "after", after)
        check_bool("group", self.group)

    def kills_with(self) -> int | None:
        return int(_signals.SIGTERM)

    def reaches_group(self) -> bool:
        return self.group

    def surfaced_in(self, error_text: str) -> bool:
        # Lightning's SIGTERMException, raised after the notice, or the program's own
        # exit on it (``sys.exit(143)`` once fit returns): both stop as the notice asks.
        # A group notice also kills the DataLoader workers: torch's loader says so.
        stopped = "SIGTERMException" in error_text or "SystemExit" in error_text
        return stopped or (self.group and "is killed by signal: Terminated" in error_text)


FREEZE_HOWS = ("stop", "gil")
MAX_FREEZE_S = 3600.0


@fault_kind
@dataclass(frozen=True)
class Freeze(Fault):
    """The rank stops making progress while alive, for ``seconds`` or for good (None).

    ``how="stop"``: SIGSTOP, as a paused VM, a debugger or a thrashing host stops a
    process; a small helper process sends SIGCONT after ``seconds`` (a stopped process
    cannot wake itself). ``how="gil"``: the main thread sleeps in native code holding the
    GIL, as a C extension stuck in a lock does, so no Python thread of the rank runs
    either (its watchdog's included). Its peers go on until they wait for it: in a
    collective, which the process group's timeout ends, or with no deadline at all (a
    flag file polled forever): that wait is the finding. A freeze stops the process it
    fires in, so ``inject()`` refuses it unless given ``allow_crash=True``: run freezes
    in a ``chaoslight.World``, which kills a rank still frozen when the example ends.
    """

    kind: ClassVar[str] = "freeze"
    kills_process: ClassVar[bool] = True  # in-process, it stops the pytest session
    stalls: ClassVar[bool] = True
    raises_nothing: ClassVar[bool] = True  # whatever its rank ended with followed it
    drawn_by_default: ClassVar[bool] = True
    simplicity: ClassVar[int] = 14
    seconds: float | None = None
    how: str = "stop"

    def _validate(self) -> None:
        if self.seconds is not None:  # None: for good
            check_seconds("seconds", self.seconds, MAX_FREEZE_S)
        check_choice("how", self.how, FREEZE_HOWS)

    def gentler(self) -> Fault:
        # A straggler as long (a second, for a freeze for good): what a race shows first.
        return Delay(min(self.seconds or 1.0, MAX_DELAY_SECONDS), **self.trigger())

    def ridden_out(self) -> Fault:
        # A pause its rank came back from is a straggler of the same length: it excuses
        # nothing a delay there would not (a peer that read what the rank had not yet
        # written fails under both). A freeze for good never ends.
        return self if self.seconds is None else self.gentler()


# In the message of the error an aborted process group raises (``_runtime/_halt.py``).
ABORTED_GROUP_MARK = "process group aborted by chaoslight"


@fault_kind
@dataclass(frozen=True)
class PgAbort(Fault):
    """The rank's process group is aborted from under it, as ``ProcessGroupNCCL.abort()``
    and NCCL's async error handling do: the collective it fires at raises
    ``torch.distributed.DistBackendError``, every later collective of the rank fails, and
    its peers get the transport error (gloo: "Connection closed by peer").

    In a World the rank's gloo connections are shut down (gloo's own ``abort()`` does
    nothing in torch 2.13); elsewhere torch's ``_abort_process_group`` ends the default
    group. It fires at the reductions (``self.log(sync_dist=True)``, ``strategy.reduce``,
    DDP's gradient all-reduce), never at a broadcast: Lightning swallows any error of its
    per-batch SIGTERM broadcast, so no program could surface an abort there.
    """

    kind: ClassVar[str] = "pg_abort"
    needs: ClassVar[str | None] = REDUCTION
    aborts_call: ClassVar[bool] = True
    catchable: ClassVar[bool] = True
    needs_peers: ClassVar[bool] = True  # one process has no group to abort
    drawn_by_default: ClassVar[bool] = True
    simplicity: ClassVar[int] = 13

    def surfaced_in(self, error_text: str) -> bool:
        return ABORTED_GROUP_MARK in error_text
