"""Where a rank was when its run failed, read from the evidence it left: the faulthandler
stacks of a hung rank, the dump of a rank that died by a fatal signal, the traceback of
a rank's exception. The known issues' signatures ask these questions (which collective a
rank waited in and who issued it; whether an exception came from Lightning's loops).
"""

from __future__ import annotations

import os
import re
from itertools import dropwhile
from pathlib import Path

from chaoslight._report import CRASHED, FAILED, HUNG, RELEASED, Outcome, RankResult
from chaoslight._runtime._frames import in_op_dispatch
from chaoslight._sites._async_work import in_async_wait
from chaoslight._verdict._hangs import SIZE_MISMATCH

_TREES = ("lightning/pytorch/", "pytorch_lightning/")  # the two installed trainer trees
_LOOPS = tuple(f"{tree}loops/" for tree in _TREES)
_PACKAGE = str(Path(__file__).resolve().parents[1]) + os.sep
# chaoslight's own modules wherever the run that left the evidence had it installed (a
# recorded run read on another machine, a wheel beside a checkout): its private layers and
# private top-level modules, never a program's file in a folder that happens to share the name.
_SEP = re.escape(os.sep)
_OUR_MODULE = re.compile(rf"{_SEP}chaoslight{_SEP}(_[a-z_]+{_SEP}|_[a-z_]+\.py$|__init__\.py$)")
_DISTRIBUTED = f"{os.sep}torch{os.sep}distributed{os.sep}"
_C10D = f"{_DISTRIBUTED}distributed_c10d.py"  # where the public collectives are defined
# Frames between a collective's caller and the wait: torch.distributed, wrapt, chaoslight's sites.
_PLUMBING = (_DISTRIBUTED, f"{os.sep}wrapt{os.sep}")


def in_chaoslight(filename: str) -> bool:
    """Whether a frame's file is chaoslight's own code (its sites, its engine)."""
    return filename.startswith(_PACKAGE) or _OUR_MODULE.search(filename) is not None


_STACK_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+ in (\S+)', re.M)  # faulthandler
_TRACEBACK_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+, in (\S+)', re.M)

FrameName = tuple[str, str]  # (file name, function)


def threads(stacks: str, current: bool = False) -> list[list[FrameName]]:
    """A faulthandler dump's threads, innermost frame first; the thread that dumped only
    when ``current`` (a fatal signal's dump: that thread is the one that died)."""
    blocks = re.split(r"^(?=Thread 0x|Current thread 0x)", stacks, flags=re.M)
    return [
        _STACK_FRAME.findall(b)
        for b in blocks
        if b.startswith("Thread 0x") or (current and b.startswith("Current thread"))
    ]


def crash_dump(result: RankResult) -> str:
    """The faulthandler dump a rank that died by a fatal signal (gloo's abort on a
    collective size mismatch, say) left at the end of its output."""
    if result.status != CRASHED:
        return ""
    _, found, dump = (result.output or "").rpartition("Fatal Python error")
    return dump if found else ""


def traceback_frames(text: str) -> list[FrameName]:
    """The frames of the exception a traceback ends with, innermost first."""
    last = text.rsplit("Traceback (most recent call last):", 1)[-1]
    return _TRACEBACK_FRAME.findall(last)[::-1]


def collective_caller(frames: list[FrameName]) -> FrameName | None:
    """The frame that issued the collective these frames wait in (None: not in one)."""
    # torch's collectives wait in ``Work.wait`` under chaoslight's marking wrapper: its
    # frame is innermost in a rank blocked in any collective (``_sites/_async_work``).
    frames = list(dropwhile(lambda frame: in_op_dispatch(frame[0]), frames))  # an op's wait
    if not frames or not (_DISTRIBUTED in frames[0][0] or in_async_wait(frames[0][0])):
        return None
    return next(
        (f for f in frames if not in_chaoslight(f[0]) and not any(p in f[0] for p in _PLUMBING)),
        None,
    )


def blocked_in(result: RankResult) -> FrameName | None:
    """Who issued the collective a rank was blocked in: from its stacks when it hung or died
    by a fatal signal, else from the torch.distributed error that released it."""
    found = blocked_at(result)
    return found[0] if found is not None else None


def blocked_at(result: RankResult) -> tuple[FrameName, str] | None:
    """Who issued the collective a rank was blocked in, and which collective it is
    (torch.distributed's function: ``broadcast``, ``barrier``; "" where no frame names
    it): one caller may issue two (Lightning's per-batch SIGTERM check broadcasts, then
    waits in a barrier)."""
    candidates = [*threads(result.stacks or ""), *threads(crash_dump(result), True)]
    exc = result.exception
    if exc is not None and exc.distributed:
        candidates.append(traceback_frames(exc.traceback))
    for frames in candidates:
        caller = collective_caller(frames)
        if caller is not None:
            named = [f for f in frames if f[0].endswith(_C10D)]
            return caller, named[-1][1] if named else ""
    return None


def collective_callers(result: RankResult) -> list[FrameName]:
    """Every collective the rank's evidence shows it in, by the frame that issued it: each
    thread of its stacks, its fatal signal's dump, and its exception when torch.distributed
    raised it (a rank whose main thread a collective's timeout released shows it there
    only: its stacks were taken while it waited in native code, with no Python frame of
    the collective)."""
    frames = [*threads(result.stacks or ""), *threads(crash_dump(result), True)]
    exc = result.exception
    if exc is not None and exc.distributed:
        frames.append(traceback_frames(exc.traceback))
    callers = (collective_caller(f) for f in frames)
    return [caller for caller in callers if caller is not None]


def in_lightning(caller: FrameName, functions: tuple[tuple[str, str], ...]) -> bool:
    """The frame is one of Lightning's ``functions`` ((path under the trainer's tree,
    function) pairs), in either installed tree (``lightning.pytorch``, ``pytorch_lightning``)."""
    filename, function = caller
    return any(
        function == name and filename.endswith(tree + path)
        for path, name in functions
        for tree in _TREES
    )


def raised_in_loops(traceback: str) -> bool:
    """The exception a traceback ends with was raised in Lightning's loops."""
    frames = traceback_frames(traceback)
    return bool(frames) and any(loop in frames[0][0] for loop in _LOOPS)


def stranded(result: RankResult) -> bool:
    """The rank's end is what a rank left behind by its peers' collectives shows: it hung
    (wherever its stacks say it waited: a rank blocked in native code shows no frame of
    the collective), was released from a collective by a transport error, failed with a
    torch.distributed error, or died in a collective (gloo's abort on a pair of mismatched
    sizes). A rank that failed with an error of its own, or crashed elsewhere, is not."""
    exc = result.exception
    if result.status in (HUNG, RELEASED):
        return True
    if result.status == FAILED:
        return exc is not None and exc.distributed
    if result.status == CRASHED:
        mismatch = any(words in (result.output or "") for words in SIZE_MISMATCH)
        return mismatch or blocked_in(result) is not None
    return False


def collective_ends(outcome: Outcome) -> frozenset[int]:
    """The ranks of ``outcome`` that ended stranded (``stranded``): once a framework's bug
    has shifted the ranks' sequences of collectives, or taken a rank out of them, these
    ends are its consequences."""
    return frozenset(r.rank for r in outcome.ranks if stranded(r))
