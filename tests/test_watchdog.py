"""The hang watchdog, in one process: when it fires, what it reports, how it interrupts."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import chaoslight
from chaoslight import HangDetected, InvalidArgument, Watchdog
from chaoslight._runtime import HangReport, Position
from chaoslight._runtime._frames import is_library
from chaoslight._runtime._stacks import snapshot
from chaoslight._runtime._watchdog import INTERRUPT_SIGNAL


def wait_at_barrier() -> None:
    """Call the dist.barrier site from a user-code frame the watchdog should name."""
    import torch.distributed as dist

    dist.barrier()


def test_fires_once_when_no_site_is_reached() -> None:
    """No site for the timeout: one report, naming the calling frame and every stack."""
    reports: list[HangReport] = []
    with chaoslight.inject(observe={"dist.barrier"}), Watchdog(0.2, reports.append) as dog:
        time.sleep(1.0)
    assert len(reports) == 1 and dog.report is reports[0]
    report = reports[0]
    assert report.timeout == 0.2 and report.position.sites == ()
    assert 0.2 <= report.position.idle_s < 1.0
    assert report.position.function == "test_fires_once_when_no_site_is_reached"
    assert report.line().startswith("rank 0 is outside every site (test_fires_once_when_no_site")
    assert "time.sleep(1.0)" in report.line()
    assert "test_watchdog.py" in report.stacks and "Thread" in report.stacks


@pytest.mark.usefixtures("gloo_group")
def test_quiet_while_sites_are_reached() -> None:
    """A site reached more often than the timeout keeps the watchdog quiet."""
    with chaoslight.inject(observe={"dist.barrier"}), Watchdog(1.0) as dog:
        for _ in range(10):
            wait_at_barrier()
            time.sleep(0.05)
    assert dog.report is None


@pytest.mark.usefixtures("gloo_group")
def test_names_the_blocked_site_its_call_number_and_the_user_frame() -> None:
    """Stuck inside a site: the report names it, its call number, and the line calling it."""
    schedule = chaoslight.Schedule([chaoslight.Delay(site="dist.barrier", nth=2, seconds=1.5)])
    with chaoslight.inject(schedule):
        wait_at_barrier()  # the first call in a process is slow, so it runs unwatched
        with Watchdog(0.3) as dog:
            wait_at_barrier()
    assert dog.report is not None
    position = dog.report.position
    assert position.sites == (("dist.barrier", 2, None),)
    assert (position.function, position.code) == ("wait_at_barrier", "dist.barrier()")
    assert position.line() == (
        f"rank 0 waits in dist.barrier #2 (wait_at_barrier → dist.barrier(), "
        f"test_watchdog.py:{position.lineno})"
    )


def test_interrupt_raises_hang_detected_in_the_main_thread() -> None:
    """interrupt_after raises HangDetected in the main thread, even inside time.sleep."""
    start = time.monotonic()
    with (
        pytest.raises(HangDetected, match=r"no chaoslight site reached for 0\.2 s: rank 0"),
        Watchdog(0.2, interrupt_after=0.1),
    ):
        time.sleep(10)
    assert time.monotonic() - start < 10 / 2  # interrupted long before the sleep ended


@pytest.fixture
def own_handler() -> Iterator[list[int]]:
    """A SIGUSR2 handler of the test's own that records the signals it gets; put back after."""
    received: list[int] = []
    previous = signal.signal(INTERRUPT_SIGNAL, lambda signum, frame: received.append(signum))
    try:
        yield received
    finally:
        signal.signal(INTERRUPT_SIGNAL, previous)


def test_a_stray_signal_while_armed_reaches_the_previous_handler(own_handler: list[int]) -> None:
    """While a watchdog that has not fired holds SIGUSR2, a stray one goes to the old handler."""
    with Watchdog(5.0, interrupt_after=0.0):
        os.kill(os.getpid(), INTERRUPT_SIGNAL)
        time.sleep(0.05)  # the handler runs here, and must not raise
    assert own_handler == [INTERRUPT_SIGNAL]


def test_stop_puts_the_previous_handler_back(own_handler: list[int]) -> None:
    """The SIGUSR2 handler is the user's again once the watchdog stops."""
    previous = signal.getsignal(INTERRUPT_SIGNAL)
    with Watchdog(5.0, interrupt_after=0.0):
        assert signal.getsignal(INTERRUPT_SIGNAL) is not previous
    assert signal.getsignal(INTERRUPT_SIGNAL) is previous
    os.kill(os.getpid(), INTERRUPT_SIGNAL)
    time.sleep(0.05)
    assert own_handler == [INTERRUPT_SIGNAL]


def test_the_handler_stays_until_the_last_interrupting_watchdog_stops(
    own_handler: list[int],
) -> None:
    """Two watchdogs share one handler: it goes back when the second of them stops."""
    previous = signal.getsignal(INTERRUPT_SIGNAL)
    outer = Watchdog(5.0, interrupt_after=1.0).start()
    try:
        with Watchdog(5.0, interrupt_after=1.0):
            pass
        assert signal.getsignal(INTERRUPT_SIGNAL) is not previous
    finally:
        outer.stop()
    assert signal.getsignal(INTERRUPT_SIGNAL) is previous


def test_a_handler_installed_over_ours_is_left_alone(own_handler: list[int]) -> None:
    """Someone replacing SIGUSR2's handler while a watchdog runs keeps theirs after stop."""

    def theirs(signum: int, frame: object) -> None:
        pass

    with Watchdog(5.0, interrupt_after=1.0):
        signal.signal(INTERRUPT_SIGNAL, theirs)
    assert signal.getsignal(INTERRUPT_SIGNAL) is theirs


def test_the_handler_is_back_after_an_interrupt(own_handler: list[int]) -> None:
    """After it interrupted the main thread, a stopped watchdog leaves the old handler."""
    previous = signal.getsignal(INTERRUPT_SIGNAL)
    with pytest.raises(HangDetected), Watchdog(0.1, interrupt_after=0.0):
        time.sleep(10)
    assert signal.getsignal(INTERRUPT_SIGNAL) is previous and own_handler == []


def test_rearming_reuses_one_thread_and_reports_afresh() -> None:
    """watching() re-arms one thread: each arming fires at most once, with a fresh report."""
    reports: list[HangReport] = []
    dog = Watchdog(5.0, reports.append)
    try:
        for _ in range(2):
            with dog.watching(0.1):
                time.sleep(0.5)
            assert dog.report is not None and not dog.armed
        thread = dog._thread
        with dog.watching(5.0):
            time.sleep(0.05)
        assert dog.report is None and dog._thread is thread
    finally:
        dog.stop()
    assert len(reports) == 2 and reports[0] is not reports[1]


def test_ticks_while_it_runs() -> None:
    """on_tick is called every tick_every seconds: a heartbeat."""
    ticks: list[float] = []
    with Watchdog(5.0, on_tick=lambda: ticks.append(time.monotonic()), tick_every=0.05):
        time.sleep(0.5)
    assert len(ticks) >= 3


def test_fires_without_an_injection_counting_from_its_start(tmp_path: Path) -> None:
    """With no inject() active it measures from its own start, and writes the dump file."""
    dump = tmp_path / "stacks.txt"
    with Watchdog(0.1, dump_path=dump) as dog:
        time.sleep(0.6)
    assert dog.report is not None and dog.report.position.sites == ()
    assert dump.read_text() == dog.report.stacks


def test_snapshot_of_another_thread() -> None:
    """snapshot() can describe any thread, by id."""
    release = threading.Event()
    worker = threading.Thread(target=release.wait)
    worker.start()
    try:
        position = snapshot(worker.ident)
    finally:
        release.set()
        worker.join()
    assert position.function is None and position.inner is not None and "wait" in position.inner


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan"), float("inf"), True, "5"])
def test_timeout_must_be_a_positive_number(timeout: object) -> None:
    """A bad timeout fails at construction with a one-line InvalidArgument."""
    with pytest.raises(InvalidArgument, match=r"timeout=.* must be a positive number"):
        Watchdog(timeout)  # type: ignore[arg-type]


def test_library_frames_are_told_from_user_code() -> None:
    """torch, Lightning, chaoslight and the standard library are library code; tests are not."""
    import lightning.pytorch

    assert is_library(torch.__file__ or "")
    assert is_library(lightning.pytorch.__file__ or "")
    assert is_library(chaoslight.__file__ or "")
    assert is_library(threading.__file__ or "")
    assert is_library("<frozen importlib._bootstrap>")
    assert not is_library(__file__)


def test_position_round_trips_through_json() -> None:
    """A Position survives the trip from a worker to the parent as JSON."""
    position = Position(
        1,
        2.5,
        (("dist.all_reduce", 14, 3), ("lightning.training_step", 4, 3)),
        "training_step",
        "/x/train.py",
        41,
        "self.log('loss', loss)",
        None,
    )
    again = Position.from_dict(json.loads(json.dumps(position.to_dict())))
    assert again == position
    assert again.line() == (
        "rank 1 is in lightning.training_step #4 at step 3 "
        "(training_step → self.log('loss', loss), train.py:41)"
    )


def test_an_exception_in_a_tick_does_not_end_the_watchdog(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A heartbeat that raises every tick is logged once; the watchdog still reports the hang."""
    reports: list[HangReport] = []

    def broken_heartbeat() -> None:
        raise OSError("the parent's pipe is gone")

    with Watchdog(0.2, reports.append, on_tick=broken_heartbeat, tick_every=0.01) as dog:
        deadline = time.monotonic() + 5.0
        while not reports and time.monotonic() < deadline:
            time.sleep(0.02)
        assert dog._thread is not None and dog._thread.is_alive()
    assert len(reports) == 1
    assert dog.tick_errors >= 2 and isinstance(dog.last_error, OSError)
    err = capsys.readouterr().err
    assert err.count("the watchdog's tick raised; it goes on") == 1
    assert "OSError: the parent's pipe is gone" in err
