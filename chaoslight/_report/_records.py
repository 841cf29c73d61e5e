"""What one rank of an example did, as data: its status, what it raised (as text), how it
died, where it was, what it printed."""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any

from chaoslight._report._status import Status
from chaoslight._runtime._deliberate import is_deliberate


@dataclass(frozen=True)
class ExceptionInfo:
    """An exception a rank raised, as text: its type's name (``OutOfMemoryError``), the
    module defining it (``torch``, ``builtins``), its message and formatted traceback, and
    whether chaoslight raised it on purpose (``_runtime/_deliberate.py``: the oracle tells
    its internal errors from its injections by that mark)."""

    type: str
    message: str
    traceback: str = ""
    distributed: bool = False  # a torch.distributed / gloo communication error
    module: str = "builtins"
    deliberate: bool = False
    # The status its process would exit with, as a launcher sees it: a SystemExit's code
    # (None is 0: Lightning's SIGTERMException is one), 1 for any other exception.
    exit_status: int = 1

    @classmethod
    def of(cls, exc: BaseException, distributed: bool = False) -> ExceptionInfo:
        """``exc`` as text, its whole chain in the traceback, read from the object itself
        (``format_exc()`` after the ``except`` block has ended knows nothing)."""
        kind = type(exc)
        text = "".join(traceback.format_exception(kind, exc, exc.__traceback__))
        return cls(
            kind.__qualname__,
            str(exc),
            text,
            distributed,
            kind.__module__,
            is_deliberate(exc),
            _exit_status(exc),
        )

    def __str__(self) -> str:
        return f"{self.type}: {self.message}" if self.message else self.type

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "message": self.message,
            "traceback": self.traceback,
            "distributed": self.distributed,
            "module": self.module,
            "deliberate": self.deliberate,
            "exit_status": self.exit_status,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> ExceptionInfo:
        return cls(
            doc["type"],
            doc["message"],
            doc.get("traceback", ""),
            bool(doc.get("distributed")),
            doc.get("module", "builtins"),
            doc.get("deliberate") is True,
            _bounded_status(doc.get("exit_status", 1)),
        )


def _exit_status(exc: BaseException) -> int:
    """What Python exits with when ``exc`` leaves the main module: a SystemExit's integer
    code (None: 0; any other object is printed, and the status is 1), else 1."""
    if isinstance(exc, SystemExit):
        code = exc.code
        if code is None:
            return 0
        return _bounded_status(code) if isinstance(code, int) else 1
    return 1


def _bounded_status(code: Any) -> int:
    """An exit status as the kernel passes it on: the low 8 bits (``exit(256)`` is 0)."""
    return int(code) & 0xFF if isinstance(code, int) and not isinstance(code, bool) else 1


@dataclass(frozen=True)
class RankResult:
    """One rank's part of an example.

    ``value`` is the target's return value when it could be pickled (``value_repr``
    always, when it returned); ``signal``/``exitcode`` say how a crashed rank died;
    ``evidence`` is one line saying where the rank was; ``stacks`` is its faulthandler
    dump when it hung; ``output`` is the tail of its stdout and stderr.
    """

    rank: int
    status: Status
    exception: ExceptionInfo | None = None
    value: Any = None
    value_repr: str | None = None
    signal: int | None = None
    exitcode: int | None = None
    evidence: str = ""
    stacks: str = ""
    output: str = ""
    pid: int = 0
    ended_s: float | None = None  # when the parent heard the rank end, from the example start
    # Hung in a collective the program's own code issued (a hook's save_checkpoint, a
    # rank-conditional barrier), not one of Lightning's loops: the likely cause of a hang.
    in_own_collective: bool = False

    @property
    def exit_status(self) -> int | None:
        """The exit status its launcher (torchrun, a scheduler) would see: 0 for a return,
        the code of a SystemExit, 1 for another exception, 128+N for signal N. None for a
        rank the World ended itself (hung, or released from a peer's failure)."""
        if self.status == Status.PASSED:
            return 0
        if self.status == Status.FAILED and self.exception is not None:
            return self.exception.exit_status
        if self.status == Status.CRASHED:
            return 128 + self.signal if self.signal else self.exitcode
        return None
