"""Sites called from several threads: each thread's calls are its own, and all are counted."""

from __future__ import annotations

import io
import threading
from typing import Any

import pytest
import torch
from helpers import saving

import chaoslight
from chaoslight import Delay, Raise, Schedule
from chaoslight._runtime._stacks import snapshot

# Ranks are read from $RANK and friends: none set, unless a test sets one.
pytestmark = pytest.mark.usefixtures("rank_env")


class BlockingFile(io.BytesIO):
    """A file whose first write waits until released: a thread stays inside torch.save."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def write(self, data: Any) -> int:
        self.entered.set()
        if not self.release.wait(timeout=30):
            raise TimeoutError("the test never released the blocked write")
        return super().write(data)


def save_in_thread(target: Any) -> threading.Thread:
    """Start a thread that calls torch.save into ``target``."""
    thread = threading.Thread(target=torch.save, args=({"x": 1}, target), daemon=True)
    thread.start()
    return thread


def test_a_thread_inside_a_site_does_not_make_other_threads_skip_it() -> None:
    """While a worker thread is inside torch.save, the main thread's call still gets its fault."""
    schedule = Schedule([Raise(ValueError("second call"), site="torch.save", nth=2)])
    blocked = BlockingFile()
    with chaoslight.inject(schedule) as run:
        worker = save_in_thread(blocked)
        try:
            assert blocked.entered.wait(timeout=30)
            with pytest.raises(ValueError, match="second call"):
                torch.save(1, io.BytesIO())
        finally:
            blocked.release.set()
            worker.join(timeout=30)
    assert [(e.site, e.call) for e in run.fired()] == [("torch.save", 2)]


def test_each_thread_sees_only_its_own_sites_in_progress() -> None:
    """A watchdog's snapshot of a thread names that thread's site, and no other thread pops it."""
    blocked = BlockingFile()
    with chaoslight.inject(observe={"torch.save", "torch.load"}) as run:
        worker = save_in_thread(blocked)
        try:
            assert blocked.entered.wait(timeout=30)
            buffer = io.BytesIO()
            torch.save(2, buffer)  # the main thread enters and leaves the same site
            buffer.seek(0)
            torch.load(buffer)
            assert snapshot(worker.ident).sites == (("torch.save", 1, None),)
            assert snapshot().sites == ()
        finally:
            blocked.release.set()
            worker.join(timeout=30)
        assert snapshot(worker.ident).sites == ()
    assert run.reached[("torch.save", 0)] == 2


def test_threads_hammering_a_site_are_all_counted_while_faults_fire_on_schedule() -> None:
    """Four threads x 100 torch.save calls: every call counted; the main thread's faults fire
    at exactly the calls the schedule names."""
    threads, calls = 4, 100
    schedule = Schedule(
        [
            Raise(ValueError("third load"), site="torch.load", nth=3),
            Delay(0, site="torch.load", nth=5, times=None),
        ]
    )
    saved = io.BytesIO()
    torch.save(torch.ones(2), saved)
    errors: list[BaseException] = []
    start = threading.Barrier(threads + 1)

    outcomes: list[str] = []
    with chaoslight.inject(schedule, observe={"torch.save"}) as run:
        workers = [
            threading.Thread(target=saving(start, calls, errors), daemon=True)
            for _ in range(threads)
        ]
        for worker in workers:
            worker.start()
        start.wait(timeout=30)
        for _ in range(8):
            saved.seek(0)
            try:
                torch.load(saved)
                outcomes.append("ok")
            except ValueError as exc:
                outcomes.append(str(exc))
        for worker in workers:
            worker.join(timeout=60)
        engine = chaoslight._runtime.active().engine  # type: ignore[union-attr]
        assert engine is not None
        stacks = [engine.in_progress_of(worker.ident) for worker in workers]
    assert errors == []
    assert outcomes == ["ok", "ok", "third load", "ok", "ok", "ok", "ok", "ok"]
    assert [(e.site, e.call) for e in run.fired()] == [("torch.load", n) for n in (3, 5, 6, 7, 8)]
    assert run.reached[("torch.save", 0)] == threads * calls
    assert stacks == [[]] * threads


def test_current_frames_hold_the_collector_off_and_put_its_state_back() -> None:
    """The stacks of every thread come back, and the garbage collector is as it was (on or
    off): a collection inside sys._current_frames can deadlock CPython 3.11."""
    import gc
    import threading

    from chaoslight._runtime._frames import current_frames

    was = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            frames = current_frames()
            assert threading.get_ident() in frames
            assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
