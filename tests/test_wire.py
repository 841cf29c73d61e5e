"""The World ↔ worker wire: every message survives its JSON line, anything else on a pipe
is one clear ``WireError``, and pickled values travel through one codec."""

from __future__ import annotations

import threading

import pytest

from chaoslight._report import FAILED, PASSED, ExceptionInfo
from chaoslight._world._target import Target
from chaoslight._world._wavefront import Front
from chaoslight._world._wire import (
    GROUP_DESTROYED,
    MESSAGES,
    Beat,
    Command,
    Dump,
    Ended,
    Hang,
    Init,
    Inited,
    Message,
    Ready,
    Reply,
    Resolve,
    Resolved,
    RunExample,
    Snapshot,
    Store,
    WireError,
    decode,
    decode_pickle,
    encode,
    encode_pickle,
)

TARGET = Target("t.py:train", "train", path="/abs/t.py")
FRONT = Front("dist.barrier", 8, 2, 3, 1.25, "f at t.py:1", by_program=True)
ERROR = ExceptionInfo("ValueError", "bad", "Traceback ...", False, "builtins", deliberate=True)

EXAMPLES: list[Message] = [
    Init(1, 2, 7, 41234, 30.0),
    Resolve(3, TARGET),
    RunExample(4, TARGET, '{"faults": []}', 2.5, "/w", "/w/rank0.jsonl", "YWJj", "/ck.ckpt", True),
    Dump(4, hung="blocked 1.2 s in collective #8"),
    Dump(4, release=True),
    Ready(123),
    Store(7, 41234),
    Inited(7, error="RuntimeError: no"),
    Resolved(3),
    Beat(4, FRONT),
    Beat(None),
    Hang(4, 1, "rank 1 at t.py:9", "Thread 0x1 ..."),
    Snapshot(4, 0, "rank 0 at t.py:3"),
    Ended(4, 1, FAILED, exception=ERROR, hung=True, group=GROUP_DESTROYED),
    Ended(4, 0, PASSED, value=encode_pickle([1, 2]), value_repr="[1, 2]"),
]


def test_every_kind_of_message_has_an_example_here() -> None:
    """The round-trip test below covers each kind on the wire (a new kind must join it)."""
    assert {type(m) for m in EXAMPLES} == set(MESSAGES.values())


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
def test_a_message_survives_its_json_line(message: Message) -> None:
    """What one end sends, the other reads back equal, nested parts and status included."""
    line = encode(message)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    back = decode(line, Message)
    assert back == message and type(back) is type(message)
    if isinstance(back, Ended):
        assert back.status is message.status  # the enum, not its text


def test_an_integer_timeout_reads_as_seconds() -> None:
    """A float field sent as a whole number (30) reads back as a float."""
    back = decode(
        b'{"op": "init", "rank": 0, "size": 2, "gen": 1, "port": 0, "timeout": 30}\n', Init
    )
    assert back.timeout == 30.0 and isinstance(back.timeout, float)


@pytest.mark.parametrize(
    ("line", "expected", "reason"),
    [
        (b"not json\n", Message, "Expecting value"),
        (b"[1, 2]\n", Message, "not a JSON object"),
        (b'{"op": "launch", "id": 1}\n', Message, "op='launch' is not a Message"),
        (b'{"op": "ready", "pid": 5}\n', Command, "op='ready' is not a Command"),
        (b'{"op": "init", "rank": 0}\n', Command, "Init lacks field(s) ['gen', 'port', 'size'"),
        (b'{"op": "ready", "pid": 5, "extra": 1}\n', Reply, "Ready has no field(s) ['extra']"),
        (b'{"op": "ready", "pid": "5"}\n', Reply, "pid='5' is not of type int"),
        (b'{"op": "ready", "pid": true}\n', Reply, "pid=True is not of type int"),
        (b'{"op": "beat", "id": 1, "front": {"site": "x"}}\n', Reply, "Front lacks field(s)"),
        (
            b'{"op": "beat", "id": 1, "front": {"site": 1, "seq": 1, "call": 1, '
            b'"step": null, "blocked_s": 1}}\n',
            Reply,
            "front.site=1 is not of type str",
        ),
        (
            b'{"op": "result", "id": 1, "rank": 0, "status": "great"}\n',
            Reply,
            "status='great' is not of type Status",
        ),
        (b'{"op": "dump", "id": 1}\n', Reply, "op='dump' is not a Reply"),
    ],
)
def test_anything_else_on_a_pipe_is_one_wire_error(
    line: bytes, expected: type[Message], reason: str
) -> None:
    """A line this end does not expect is one WireError line quoting it and saying why."""
    with pytest.raises(WireError) as caught:
        decode(line, expected)
    text = str(caught.value)
    assert text.startswith("malformed World message '") and reason in text
    assert "\n" not in text


def test_a_huge_malformed_line_is_quoted_clipped() -> None:
    """The error quotes at most a couple of hundred characters of what it refused."""
    with pytest.raises(WireError) as caught:
        decode(b"x" * 100_000, Reply)
    assert len(str(caught.value)) < 400 and "…" in str(caught.value)


def test_pickled_values_round_trip_and_a_limit_drops_big_ones() -> None:
    """A value comes back equal; one over the limit is None; an unpicklable one raises."""
    value = {"loss": [0.5, 0.25], "name": "ok"}
    blob = encode_pickle(value)
    assert blob is not None and decode_pickle(blob) == value
    assert encode_pickle(b"x" * 1000, limit=100) is None
    assert encode_pickle(b"x" * 10, limit=100) is not None
    with pytest.raises(TypeError):
        encode_pickle(threading.Lock())
