"""The World ↔ worker wire: one frozen dataclass per message, one JSON line each.

A worker has three pipes (``_slot.Slot``, ``_worker.Channel``). Down the first go the
commands its main thread reads between examples: ``Init`` (create the gloo group),
``Resolve`` (import a target), ``RunExample`` (one example). Down the second goes ``Dump``
(where are you now?), read by a thread so it is answered while the main thread is
stuck. Up the third come the replies: ``Ready``, ``Store``, ``Inited``, ``Resolved``,
``Beat``, ``Hang``, ``Snapshot``, ``Ended``. End of file on a pipe means the other
side is gone.

``encode`` and ``decode`` are the one place where a message meets JSON: a field is a
JSON scalar, ``X | None``, an enum (its value) or a frozen dataclass of those (an
object). Both ends are chaoslight's own processes, so the format agrees only with itself;
anything else on a pipe is a bug, and ``decode`` says so in one ``WireError``.

Pickled values (the checks sent to a rank, the value a target returned) travel as text
made by ``encode_pickle`` and read back by ``decode_pickle``.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import pickle
import types
import typing
from dataclasses import dataclass
from enum import Enum
from functools import cache
from typing import Any, ClassVar, TypeVar

from chaoslight._report import ExceptionInfo, Status
from chaoslight._schedule import Vocabulary
from chaoslight._schedule._clip import clip
from chaoslight._schedule._errors import ChaosError
from chaoslight._world._target import Target
from chaoslight._world._wavefront import Front


class Group(Vocabulary):
    """How a rank's process group came out of an example (``Ended.group``)."""

    KEPT = "ok"  # whole: the next example reuses it
    DESTROYED = "destroyed"  # destroyed after a failure, to release the peers
    LOST = "lost"  # the target destroyed or replaced it
    # The rank process must go: a thread the example started still runs the program's
    # code, and would run inside the next example. The World replaces the process.
    RETIRED = "retired"


GROUP_KEPT, GROUP_DESTROYED, GROUP_LOST, GROUP_RETIRED = (
    Group.KEPT,
    Group.DESTROYED,
    Group.LOST,
    Group.RETIRED,
)


class WireError(ChaosError):
    """A line on a World pipe that is not a message this end expects: a bug in chaoslight."""


class Message:
    """A message on a World pipe; ``OP`` names its kind on the wire."""

    OP: ClassVar[str]


class Command(Message):
    """Parent to worker."""


class Reply(Message):
    """Worker to parent."""


@dataclass(frozen=True)
class Answer(Reply):
    """The reply to a command: ``answers`` is its number (an ``Init``'s ``gen``, a
    ``Resolve``'s ``id``), so that a late answer to an earlier one is never taken."""

    answers: int


# -- commands ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Init(Command):
    """Create the process group afresh: rank ``rank`` of ``size``, generation ``gen`` (its
    ``Answer`` carries it). Rank 0 hosts the store (``port`` 0) and answers ``Store``; the
    others are sent its port."""

    OP = "init"
    rank: int
    size: int
    gen: int
    port: int
    timeout: float


@dataclass(frozen=True)
class Resolve(Command):
    """Import ``target`` now, so that a bad one fails before any example runs."""

    OP = "resolve"
    id: int
    target: Target


@dataclass(frozen=True)
class RunExample(Command):
    """Run example ``id``: ``target`` under ``schedule`` (its JSON) in ``workdir``,
    appending events to ``events``; ``checks`` is ``encode_pickle``'s text or None;
    ``ledger``, the example's damage ledger (``_sites._damage``), which the parent restores."""

    OP = "run"
    id: int
    target: Target
    schedule: str
    timeout: float
    workdir: str
    events: str
    checks: str | None = None
    resume_from: str | None = None
    trace: bool = False
    ledger: str | None = None


@dataclass(frozen=True)
class Dump(Command):
    """Sent on the control pipe during example ``id``: answer with a ``Snapshot``; with
    ``hung`` (why the parent holds the example hung), with a ``Hang``; with ``release``,
    shut the process group's connections so that gloo lets the rank go."""

    OP = "dump"
    id: int
    hung: str | None = None
    release: bool = False


# -- replies -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Ready(Reply):
    """The worker has imported torch (and the preloads) and waits for commands."""

    OP = "ready"
    pid: int


@dataclass(frozen=True)
class Store(Answer):
    """Rank 0's store for the group of generation ``answers`` listens on ``port``."""

    OP = "store"
    port: int


@dataclass(frozen=True)
class Inited(Answer):
    """Generation ``answers``' process group exists here, or could not be made (``error``)."""

    OP = "inited"
    error: str | None = None


@dataclass(frozen=True)
class Resolved(Answer):
    """``Resolve`` number ``answers`` imported its target, or could not (``error``)."""

    OP = "resolved"
    error: str | None = None


@dataclass(frozen=True)
class Beat(Reply):
    """Example ``id`` still runs; ``front``: the collective the rank is blocked in."""

    OP = "beat"
    id: int | None
    front: Front | None = None


@dataclass(frozen=True)
class Hang(Reply):
    """Rank ``rank`` is hung in example ``id``: where it is (``line``), every stack."""

    OP = "hang"
    id: int | None
    rank: int
    line: str
    stacks: str = ""


@dataclass(frozen=True)
class Snapshot(Reply):
    """Where rank ``rank`` is in example ``id`` (asked by a plain ``Dump``)."""

    OP = "snapshot"
    id: int
    rank: int
    line: str
    stacks: str = ""


@dataclass(frozen=True)
class Ended(Reply):
    """How rank ``rank`` ended example ``id``: it returned (``value`` as
    ``encode_pickle``'s text, None if it does not pickle; ``value_repr`` always) or raised
    (``exception``); whether its watchdog had fired (``hung``); what became of its
    process group (``group``: kept, destroyed to release its peers, or lost)."""

    OP = "result"
    id: int
    rank: int
    status: Status
    exception: ExceptionInfo | None = None
    value: str | None = None
    value_repr: str | None = None
    hung: bool = False
    group: Group = GROUP_KEPT


COMMANDS = (Init, Resolve, RunExample, Dump)
REPLIES = (Ready, Store, Inited, Resolved, Beat, Hang, Snapshot, Ended)
MESSAGES: dict[str, type[Message]] = {kind.OP: kind for kind in COMMANDS + REPLIES}
M = TypeVar("M", bound=Message)


def encode(message: Message) -> bytes:
    """One JSON line, newline included."""
    return (json.dumps({"op": message.OP, **_to_json(message)}) + "\n").encode()


def decode(line: bytes | str, expected: type[M]) -> M:
    """The message on ``line``, which must be an ``expected`` (``Command``, ``Reply``,
    ``Dump``...); ``WireError`` for anything else."""
    try:
        doc = json.loads(line)
        if not isinstance(doc, dict):
            raise WireError("not a JSON object")
        op = doc.pop("op", None)
        kind = MESSAGES.get(op) if isinstance(op, str) else None
        if kind is None or not issubclass(kind, expected):
            raise WireError(f"op={op!r} is not a {expected.__name__}")
        return typing.cast(M, _from_json(kind, doc))
    except (WireError, ValueError) as exc:
        text = line.decode(errors="replace") if isinstance(line, bytes) else line
        raise WireError(f"malformed World message {clip(repr(text), 200)}: {exc}") from None


def _to_json(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    return value


@cache
def _hints(kind: type) -> dict[str, Any]:
    return typing.get_type_hints(kind)


def _from_json(kind: Any, value: Any, name: str = "") -> Any:
    """``value`` read as a ``kind`` (an annotation); ``WireError`` naming the field if not."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(kind):
            return None
        kind = next(arg for arg in typing.get_args(kind) if arg is not type(None))
    if isinstance(kind, type) and dataclasses.is_dataclass(kind) and isinstance(value, dict):
        fields = dataclasses.fields(kind)
        required = {f.name for f in fields if f.default is dataclasses.MISSING}
        unknown = sorted(set(value) - {f.name for f in fields})
        missing = sorted(required - set(value))
        if unknown:
            raise WireError(f"{kind.__name__} has no field(s) {unknown}")
        if missing:
            raise WireError(f"{kind.__name__} lacks field(s) {missing}")
        hints = _hints(kind)
        return kind(**{key: _from_json(hints[key], v, f"{name}{key}.") for key, v in value.items()})
    if isinstance(kind, type) and issubclass(kind, Enum):
        try:
            return kind(value)
        except (ValueError, TypeError):
            pass
    elif kind is float and type(value) in (int, float):
        return float(value)
    elif type(value) is kind:  # exact: True is not an int here
        return value
    what = getattr(kind, "__name__", kind)
    raise WireError(f"{name.rstrip('.') or 'it'}={clip(repr(value), 60)} is not of type {what}")


def encode_pickle(value: Any, limit: int | None = None) -> str | None:
    """``value`` pickled, as base64 text; None if the pickle is over ``limit`` bytes.
    Raises what ``pickle.dumps`` raises (the caller decides what an unpicklable value
    means). Pickle is safe here only because both ends are this World's own processes,
    talking over pipes it made: nothing read from a file is ever unpickled."""
    data = pickle.dumps(value)
    if limit is not None and len(data) > limit:
        return None
    return base64.b64encode(data).decode()


def decode_pickle(text: str) -> Any:
    """What ``encode_pickle`` made ``text`` from; raises what unpickling raises (a class
    this process cannot import, for one)."""
    return pickle.loads(base64.b64decode(text))
