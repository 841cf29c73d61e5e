"""Hangs seen at the wavefront: ranks blocked in collectives that cannot meet, reported
long before the timeout; ranks that are only late are never called hung."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import chaoslight
from chaoslight import World, inject
from chaoslight._report._text import cause_first
from chaoslight._runtime import PROGRESS_SITES
from chaoslight._world._sched import Reading, asleep, read_threads
from chaoslight._world._wavefront import (
    BLOCKED_S,
    CONFIRM_S,
    DDP_INTERNAL,
    END_GRACE_S,
    FRESH_S,
    Front,
    HangDecider,
    HangDecision,
    RankState,
    Tracker,
)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = f"{ROOT}/examples/ddp_train.py:train"
TIMEOUT = 30.0
FAST = TIMEOUT / 3  # a hang seen at the wavefront is reported well within this


def target(name: str) -> str:
    """A target from tests/wavefront_targets.py, by absolute path."""
    return f"{ROOT}/tests/wavefront_targets.py:{name}"


def front(site: str, seq: int, blocked_s: float = 1.0) -> Front:
    """A report of a rank blocked in ``site``, its collective ``#seq``."""
    return Front(site, seq, call=1, step=None, blocked_s=blocked_s, caller="f at t.py:1")


def decide_twice(
    decider: HangDecider, seen: list[RankState], now: float
) -> tuple[HangDecision | None, HangDecision | None]:
    """What the decider says now and, with every report renewed, ``CONFIRM_S`` later."""
    first = decider.decide(now, seen)
    later = now + CONFIRM_S + 0.01
    renewed = [
        RankState(s.rank, s.pending, s.front, later, s.ended_at, s.how) if s.pending else s
        for s in seen
    ]
    return first, decider.decide(later, renewed)


# -- the decider, on reports alone -------------------------------------------------------------
def test_different_collectives_are_a_hang_once_confirmed() -> None:
    """Barrier against broadcast at the same number: hung, after a confirming look."""
    now = 100.0
    seen = [
        RankState(0, True, front("dist.barrier", 8), now),
        RankState(1, True, front("dist.broadcast", 8), now),
    ]
    first, second = decide_twice(HangDecider(), seen, now)
    assert first is None
    assert second is not None
    assert second.why(0) == (
        "blocked 1.0 s in collective #8, dist.barrier from f at t.py:1; "
        "rank 1 is in collective #8, dist.broadcast from f at t.py:1: the collectives differ"
    )
    assert "rank 0 is in collective #8, dist.barrier" in second.why(1)


def test_same_kind_at_other_numbers_is_a_hang() -> None:
    """Two all-reduces the ranks count differently (#4 against #5) cannot meet."""
    seen = [RankState(r, True, front("dist.all_reduce", 4 + r), 10.0) for r in range(2)]
    assert decide_twice(HangDecider(), seen, 10.0)[1] is not None


def test_one_collective_one_number_is_a_straggler_wait() -> None:
    """Every rank in collective #8, a barrier, however long: never a hang."""
    seen = [RankState(r, True, front("dist.barrier", 8, blocked_s=20.0), 10.0) for r in range(3)]
    assert decide_twice(HangDecider(), seen, 10.0) == (None, None)


def test_a_rank_between_collectives_blocks_the_decision() -> None:
    """Rank 2 is not blocked (computing, or sleeping in a Delay): nothing is decided."""
    seen = [
        RankState(0, True, front("dist.barrier", 8), 10.0),
        RankState(1, True, front("dist.broadcast", 8), 10.0),
        RankState(2, True, None, 10.0),
    ]
    assert decide_twice(HangDecider(), seen, 10.0) == (None, None)


def test_a_wait_in_ddps_own_collective_is_a_hang_only_beside_another_collective() -> None:
    """A rank asleep in a collective DDP issues where no site sees it (its forward's buffer
    broadcast): hung beside a rank frozen for good or one in a seen collective; every rank
    in such a collective, whatever their counts, waits for a straggler."""
    frozen = Front("lightning.training_step", 2, 1, 1, 0.0, frozen=True, frozen_for=None)
    peer = RankState(1, True, front(DDP_INTERNAL, 2), 10.0)
    beside_frozen = [RankState(0, True, frozen, 10.0), peer]
    assert decide_twice(HangDecider(), beside_frozen, 10.0)[1] is not None
    beside_barrier = [RankState(0, True, front("dist.barrier", 3), 10.0), peer]
    assert decide_twice(HangDecider(), beside_barrier, 10.0)[1] is not None
    both_unseen = [RankState(0, True, front(DDP_INTERNAL, 1), 10.0), peer]
    assert decide_twice(HangDecider(), both_unseen, 10.0) == (None, None)


def test_short_or_stale_reports_decide_nothing() -> None:
    """A rank blocked for less than BLOCKED_S, or a report older than FRESH_S: no hang."""
    short = [
        RankState(0, True, front("dist.barrier", 8, blocked_s=BLOCKED_S / 2), 10.0),
        RankState(1, True, front("dist.broadcast", 8), 10.0),
    ]
    assert decide_twice(HangDecider(), short, 10.0) == (None, None)
    stale = [
        RankState(0, True, front("dist.barrier", 8), 10.0),
        RankState(1, True, front("dist.broadcast", 8), 10.0 - 2 * FRESH_S),
    ]
    assert HangDecider().decide(10.0, stale) is None


def test_a_changed_picture_starts_the_confirmation_again() -> None:
    """Rank 1 moved on between two looks: the new picture needs its own confirmation."""
    decider = HangDecider()
    before = [
        RankState(0, True, front("dist.barrier", 8), 10.0),
        RankState(1, True, front("dist.broadcast", 8), 10.0),
    ]
    assert decider.decide(10.0, before) is None
    moved = [before[0], RankState(1, True, front("dist.all_reduce", 9), 10.5)]
    assert decider.decide(10.5, moved) is None


def test_an_ended_rank_decides_only_after_gloo_had_its_chance() -> None:
    """Rank 0 returned; rank 1 waits alone: hung once END_GRACE_S has passed, not before."""
    ended = RankState(0, False, ended_at=10.0, how="returned")
    early = [ended, RankState(1, True, front("dist.barrier", 17), 10.1)]
    assert decide_twice(HangDecider(), early, 10.1) == (None, None)
    late = 10.0 + END_GRACE_S + 0.1
    waiting = [ended, RankState(1, True, front("dist.barrier", 17), late)]
    first, second = decide_twice(HangDecider(), waiting, late)
    assert first is None
    assert second is not None
    assert second.why(1) == (
        "blocked 1.0 s in collective #17, dist.barrier from f at t.py:1, "
        "which no rank that ended will join (rank 0 returned)"
    )


def test_a_delay_inside_a_collective_site_is_not_blocking(gloo_group: object) -> None:
    """A rank sleeping in a Delay fault at dist.barrier is not blocked in the collective."""
    import torch.distributed as dist

    tracker = Tracker(lambda: True)
    looks: list[Front | None] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            looks.append(tracker.look())
            time.sleep(0.05)

    schedule = chaoslight.Schedule([chaoslight.Delay(site="dist.barrier", seconds=1.0)])
    with inject(schedule, observe=PROGRESS_SITES):
        thread = threading.Thread(target=watch)
        thread.start()
        try:
            dist.barrier()
        finally:
            done.set()
            thread.join()
    assert len(looks) > 5 and all(look is None for look in looks)


# -- asleep or wanting a CPU: the scheduler's view, not a CPU share --------------------------
MS = 1_000_000  # nanoseconds
MAIN, GLOO, INTRA_OP = 100, 101, 102
WINDOW_S = 0.1


def sleeping(cpu_ms: int = 500, wait_ms: int = 20, slices: int = 40) -> Reading:
    """A thread asleep now, with these counters."""
    return Reading("S", cpu_ms * MS, wait_ms * MS, slices)


def later(reading: Reading, state: str, ran_ms: float, waited_ms: float, got_cpu: int) -> Reading:
    """``reading`` one window later: in ``state``, having run and waited that long."""
    assert reading.wait_ns is not None and reading.slices is not None
    return Reading(
        state,
        reading.cpu_ns + int(ran_ms * MS),
        reading.wait_ns + int(waited_ms * MS),
        reading.slices + got_cpu,
    )


def threads(
    **changes: tuple[str, float, float, int],
) -> tuple[dict[int, Reading], dict[int, Reading]]:
    """Readings of a main thread, a gloo thread and an intra-op thread, all asleep, one
    window apart; ``changes`` (by name) say what one did meanwhile."""
    ids = {"main": MAIN, "gloo": GLOO, "intra_op": INTRA_OP}
    before = {tid: sleeping() for tid in ids.values()}
    after = dict(before)
    for name, change in changes.items():
        after[ids[name]] = later(before[ids[name]], *change)
    return before, after


def test_a_process_sleeping_in_a_collective_is_asleep() -> None:
    """Every thread asleep, gloo's loop waking every 10 ms (waiting a CPU each time): asleep."""
    assert asleep(*threads(), MAIN, WINDOW_S)
    assert asleep(*threads(gloo=("S", 0.2, 30, 10)), MAIN, WINDOW_S)


def test_a_starved_runnable_main_thread_is_never_asleep() -> None:
    """A main thread that waits for a CPU (runnable, its CPU share near nothing) is not asleep:
    neither while it waits nor once it got the CPU and waited most of the window for it."""
    assert not asleep(*threads(main=("R", 1, 90, 1)), MAIN, WINDOW_S)
    assert not asleep(*threads(main=("R", 0, 0, 0)), MAIN, WINDOW_S)  # no CPU yet at all
    assert not asleep(*threads(main=("S", 2, 80, 3)), MAIN, WINDOW_S)  # just went to sleep


def test_a_starved_gloo_thread_keeps_the_process_awake() -> None:
    """The main thread sleeps in a collective whose gloo thread still works, starved: not
    asleep (the peer may be one collective ahead, and this one still completes)."""
    assert not asleep(*threads(gloo=("R", 20, 80, 6)), MAIN, WINDOW_S)
    before, after = threads()
    runnable = Reading("R", 0, 0, 0)  # runnable at both looks, no CPU between: waited all along
    assert not asleep({**before, GLOO: runnable}, {**after, GLOO: runnable}, MAIN, WINDOW_S)


def test_a_thread_in_the_kernels_uninterruptible_wait_keeps_the_process_awake() -> None:
    """gloo's thread copying into fresh memory on a machine short of it faults its pages in
    (``D``), accruing neither CPU nor run-queue time: working, not asleep (fresh-clone run
    fc12 read a long all_gather as blocked)."""
    assert not asleep(*threads(gloo=("D", 0, 0, 0)), MAIN, WINDOW_S)


def test_a_backward_that_computes_is_not_asleep() -> None:
    """In autograd, computing: the main thread runs, or waits at an op's end for an intra-op
    thread that computes or is starved; never asleep."""
    assert not asleep(*threads(main=("R", 95, 5, 3)), MAIN, WINDOW_S)
    assert not asleep(*threads(intra_op=("R", 90, 8, 4)), MAIN, WINDOW_S)
    assert not asleep(*threads(intra_op=("S", 10, 70, 9)), MAIN, WINDOW_S)


def test_without_schedstat_the_state_letter_and_cpu_time_decide() -> None:
    """No run-queue counters: a sleeping process is asleep; a runnable thread, or one that
    used CPU, is not."""
    before = {MAIN: Reading("S", 500 * MS), GLOO: Reading("S", 40 * MS)}
    assert asleep(before, dict(before), MAIN, WINDOW_S)
    assert not asleep(before, {**before, GLOO: Reading("R", 40 * MS)}, MAIN, WINDOW_S)
    assert not asleep(before, {**before, MAIN: Reading("S", 580 * MS)}, MAIN, WINDOW_S)


def test_this_machine_reads_its_threads() -> None:
    """This process's threads are read, the caller's left out, the test's own thread running."""
    me = threading.get_native_id()
    seen = read_threads(skip=-1)
    assert seen is not None and seen[me].state == "R"
    others = read_threads(skip=me)
    assert others is not None and me not in others


KEY = ("dist.all_reduce", 8, 1, 3)


def looks(tracker: Tracker, count: int) -> list[Front | None]:
    """What ``count`` looks of ``tracker`` say, a few milliseconds apart."""
    seen = []
    for _ in range(count):
        seen.append(tracker.look())
        time.sleep(0.002)
    return seen


def tracker_reading(monkeypatch: pytest.MonkeyPatch, main: list[Reading] | None) -> Tracker:
    """A tracker whose main thread sits in collective #8 (its frames say so) and whose
    threads read as ``main`` says, one reading per look (None: no /proc)."""
    readings = iter(main or [])
    tracker = Tracker(
        lambda: True, read=lambda skip: None if main is None else {MAIN: next(readings)}
    )
    tracker.main_tid = MAIN
    monkeypatch.setattr(tracker, "_key", lambda frame: KEY)
    return tracker


def test_the_tracker_reports_a_sleeping_rank_and_never_a_starved_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In collective #8 and asleep: blocked, longer at every look. Runnable and starved (a
    CPU share as small): never blocked, however long. No /proc: never blocked."""
    asleep_ = [sleeping()] * 6
    reports = looks(tracker_reading(monkeypatch, asleep_), 6)
    assert reports[0] is None and all(r is not None and r.seq == 8 for r in reports[1:])
    assert reports[-1] is not None and reports[1] is not None
    assert reports[-1].blocked_s > reports[1].blocked_s
    starved = [sleeping()]
    for _ in range(9):
        starved.append(later(starved[-1], "R", 0.5, 1.5, 1))
    assert looks(tracker_reading(monkeypatch, starved), 10) == [None] * 10
    assert looks(tracker_reading(monkeypatch, None), 5) == [None] * 5


def test_a_collective_still_worked_by_gloo_is_not_blocking(gloo_group: object) -> None:
    """The main thread sleeps in a long all_gather that gloo's thread computes (as a starved
    rank's thread would, long after its peer moved on): never blocked."""
    import torch
    import torch.distributed as dist

    tracker = Tracker(lambda: True)
    reports: list[Front | None] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            reports.append(tracker.look())
            time.sleep(0.01)

    tensor = torch.ones(20_000_000)
    gathered = [torch.empty_like(tensor)]
    with inject(chaoslight.Schedule(), observe=PROGRESS_SITES):
        thread = threading.Thread(target=watch)
        thread.start()
        try:
            time.sleep(0.05)  # a few looks before, to read the threads asleep first
            before = len(reports)
            # Gathered again until the watcher has looked ten times during the collectives,
            # however fast this machine computes one (bounded).
            for _ in range(500):
                dist.all_gather(gathered, tensor)
                if len(reports) - before >= 10:
                    break
        finally:
            done.set()
            thread.join()
    assert len(reports) - before >= 10 and all(report is None for report in reports)


# -- real ranks ------------------------------------------------------------------------------
@pytest.fixture
def world(world2: World) -> World:
    """The session's 2-rank World (a World's start costs seconds: one for the suite)."""
    return world2


def numbers(text: str, site: str) -> list[int]:
    """The collective numbers ``text`` gives ``site``: ``collective #8, dist.barrier``."""
    return [int(n) for n in re.findall(rf"collective #(\d+), {re.escape(site)}\b", text)]


@pytest.mark.slow
def test_a_barrier_on_one_rank_is_reported_at_the_wavefront(world: World) -> None:
    """Rank 0's barrier against rank 1's SIGTERM broadcast: hung long before the timeout."""
    pids = world.pids
    outcome = world.run(target("export_on_rank_0"), timeout=TIMEOUT)
    assert outcome.status == "hung", outcome.report()
    assert outcome.wall_s < FAST, outcome.report()
    assert [r.status for r in outcome.ranks] == ["hung", "hung"]
    rank0, rank1 = outcome.evidence[0], outcome.evidence[1]
    assert rank0.startswith("rank 0 waits in dist.barrier #")
    assert rank1.startswith("rank 1 waits in dist.broadcast #")
    for line in (rank0, rank1):
        assert "dist.barrier from _export at wavefront_targets.py:" in line
        assert "dist.broadcast from _broadcast_sigterm_tensor at training_epoch_loop.py:" in line
        assert numbers(line, "dist.barrier") == numbers(line, "dist.broadcast")
        assert line.endswith("the collectives differ")
    assert all("Thread" in r.stacks for r in outcome.ranks)
    assert world.pids == pids  # released by the World, not killed
    assert world.run(EXAMPLE, timeout=TIMEOUT).passed


@pytest.mark.slow
@pytest.mark.parametrize("culprit", [0, 1])
def test_the_rank_hung_in_the_programs_own_collective_is_named_first(
    world: World, culprit: int
) -> None:
    """Of two ranks hung in different collectives, the one in a collective the program
    issued (its hook's barrier) leads the report, not Lightning's per-batch broadcast."""
    outcome = world.run(target(f"export_on_rank_{culprit}"), timeout=TIMEOUT)
    assert outcome.status == "hung", outcome.report()
    own = [r.in_own_collective for r in outcome.ranks]
    assert own == [r == culprit for r in (0, 1)], outcome.report()
    assert cause_first(outcome).startswith(f"rank {culprit} waits in dist.barrier #")


@pytest.mark.slow
def test_mismatched_collectives_outside_lightning_are_reported_fast(world: World) -> None:
    """An all-reduce against a barrier, both collective #2: hung, both named."""
    outcome = world.run(target("barrier_against_all_reduce"), timeout=TIMEOUT)
    assert outcome.status == "hung" and outcome.wall_s < FAST, outcome.report()
    for line in outcome.evidence.values():
        assert numbers(line, "dist.all_reduce") == numbers(line, "dist.barrier") == [2]


@pytest.mark.slow
def test_a_dropped_collective_is_reported_fast(world: World) -> None:
    """A DropSync desync (rank 1 skips a synchronised log) is hung well within the timeout."""
    schedule = chaoslight.Schedule([chaoslight.DropSync(site="dist.all_reduce", rank=1, step=1)])
    outcome = world.run(f"{ROOT}/tests/world_targets.py:log_at_batch_end", schedule, timeout=30)
    assert outcome.status == "hung" and outcome.wall_s < FAST, outcome.report()
    assert [r.status for r in outcome.ranks] == ["hung", "hung"]
    assert outcome.evidence[0].startswith("rank 0 waits in dist.all_reduce #")
    assert outcome.evidence[1].endswith("the collectives differ")


@pytest.mark.slow
def test_a_rank_that_returned_while_its_peer_waits_is_reported_fast(world: World) -> None:
    """Rank 0 returned; rank 1 waits at a barrier alone: hung, rank 0 still passed."""
    outcome = world.run(target("extra_barrier_on_rank_1"), timeout=TIMEOUT)
    assert outcome.status == "hung" and outcome.wall_s < FAST, outcome.report()
    assert [r.status for r in outcome.ranks] == ["passed", "hung"]
    assert "which no rank that ended will join (rank 0 returned)" in outcome.evidence[1]
    assert world.run(EXAMPLE, timeout=TIMEOUT).passed


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "schedule"),
    [
        (EXAMPLE, "delay@dist.broadcast rank=1 step=1 seconds=3"),
        (EXAMPLE, "delay@lightning.training_step rank=1 step=1 seconds=3"),
        (target("broadcast_then_reduce"), "delay@dist.broadcast rank=1 seconds=3"),
        (target("late_rank_1"), None),
    ],
)
def test_a_late_rank_is_never_a_hang(world: World, name: str, schedule: str | None) -> None:
    """A rank sleeping in a Delay fault or busy in user code keeps the others waiting: passes."""
    outcome = world.run(name, schedule, timeout=TIMEOUT)
    assert outcome.status == "passed", outcome.report()


@pytest.mark.slow
def test_a_rank_stuck_outside_every_collective_still_waits_for_the_timeout(world: World) -> None:
    """The sequence view cannot see a rank outside collectives: the timeout decides."""
    timeout = 2.0
    outcome = world.run(f"{ROOT}/tests/world_targets.py:stubborn", timeout=timeout)
    assert outcome.status == "hung", outcome.report()
    assert outcome.wall_s >= timeout
    assert "collectives differ" not in str(outcome.evidence)


@pytest.mark.slow
def test_a_rank_waiting_in_ddps_gradient_all_reduce_is_seen_at_the_wavefront(
    world: World,
) -> None:
    """Lightning's SIGTERM handler broadcasts while the peer waits in DDP's gradient
    all-reduce inside backward: hung at the wavefront, the handler's broadcast named."""
    schedule = chaoslight.Schedule.parse("preempt@lightning.training_step rank=1 step=3")
    target_ = f"{ROOT}/examples/catalogue/preemption.py:train_buggy"
    outcome = world.run(target_, schedule, timeout=TIMEOUT)
    assert outcome.status == "hung" and outcome.wall_s < FAST, outcome.report()
    evidence = " ".join(outcome.evidence.values())
    assert "dist.gradient_allreduce" in evidence and "_sigterm_notifier_fn" in evidence


@pytest.mark.slow
@pytest.mark.parametrize("site", ["fabric.setup", "fabric.forward"])
def test_a_peer_of_a_rank_frozen_for_good_is_seen_waiting_outside_every_site(
    world: World, site: str
) -> None:
    """A Fabric loop: rank 0 frozen for good; rank 1 passes the site (no fault can fire
    there on it), so no site is in progress while it waits in DDP's own collective (the
    parameter check in ``setup``, the buffer broadcast in ``forward``). Hung at the
    wavefront, not at the timeout, and the freeze's verdict: the program did nothing wrong."""
    step = " step=1" if site == "fabric.forward" else ""
    target_ = f"{ROOT}/examples/loops/fabric_spike_reduce.py:train_fixed"
    outcome = world.run(target_, f"freeze@{site} rank=0{step}", timeout=TIMEOUT)
    assert outcome.status == "hung" and outcome.wall_s < FAST, outcome.report()
    assert "frozen for good" in outcome.evidence[1], outcome.report()
    assert not chaoslight.judge(outcome).failed, outcome.report()


@contextmanager
def busy_processes(count: int) -> Iterator[None]:
    """``count`` processes spinning on a CPU each (killed after the block)."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


@pytest.mark.slow
def test_correct_programs_beside_busy_processes_are_never_hung(world: World) -> None:
    """4 processes spin on this machine's cores while correct programs run (each rank
    starved to a fraction of a core): they pass; the mismatched one is still hung at once."""
    with busy_processes(4):
        for name in (EXAMPLE, target("broadcast_then_reduce"), EXAMPLE):
            outcome = world.run(name, timeout=TIMEOUT)
            assert outcome.status == "passed", outcome.report()
        outcome = world.run(target("barrier_against_all_reduce"), timeout=TIMEOUT)
    assert outcome.status == "hung" and outcome.wall_s < 5.0, outcome.report()
