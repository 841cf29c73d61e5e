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

    @classmethod
    def of(cls, exc: BaseException, distributed: bool = False) -> ExceptionInfo:
        """``exc`` as text, its whole chain in the traceback, read from the object itself
        (``format_exc()`` after the ``except`` block has ended knows nothing)."""
        kind = type(exc)
        text = "".join(traceback.format_exception(kind, exc, exc.__traceback__))
        return cls(
            kind.__qualname__, str(exc), text, distributed, kind.__module__, is_deliberate(exc)
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
        )


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
