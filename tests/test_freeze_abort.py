"""The ``freeze`` and ``pg_abort`` fault kinds: their forms, bounds, traits, actions and verdicts.

Fast tests build schedules, run the actions in a child process and judge synthetic
outcomes; the World tests (marked slow) run the planted pairs of ``examples/bugs``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings

import chaoslight
from chaoslight import Event, Freeze, InvalidSchedule, Outcome, PgAbort, Schedule, judge
from chaoslight._report._outcome import overall, settle
from chaoslight._report._records import ExceptionInfo, RankResult
from chaoslight._runtime import FIRED
from chaoslight._runtime._halt import abort_group
from chaoslight._schedule import SITES
from chaoslight._schedule._catalog import REDUCTION
from chaoslight._schedule._faults import ABORTED_GROUP_MARK
from chaoslight._verdict._oracle import BENIGN_RULE, FAILED_CLEANLY, SWALLOWED, Rule
from chaoslight._world._wavefront import (
    BLOCKED_S,
    BOUNDED_WAIT,
    CONFIRM_S,
    Front,
    HangDecider,
    RankState,
)
from chaoslight.checks import Violation
from chaoslight.strategies import DEFAULT_KINDS, IN_PROCESS_KINDS, one_fault

ROOT = Path(__file__).resolve().parents[1]
FREEZE = "freeze@lightning.on_train_epoch_end rank=0"
GLOO = "Connection closed by peer [127.0.0.1]:7"
ABORT = "pg_abort@dist.all_reduce rank=1 step=2"


# -- text and JSON forms, bounds ------------------------------------------------------------
def test_freeze_round_trips_through_its_text_and_json_forms() -> None:
    """A freeze's seconds and how are written back as given; for good is the default."""
    text = "freeze@lightning.training_step rank=1 step=2 seconds=3 how=gil"
    schedule = Schedule.parse(text)
    (fault,) = schedule.faults
    assert isinstance(fault, Freeze) and fault.seconds == 3 and fault.how == "gil"
    assert str(fault) == text
    assert Schedule.from_json(schedule.to_json()) == schedule
    assert str(Freeze(site="lightning.training_step")) == "freeze@lightning.training_step"
    assert Freeze(site="lightning.training_step").seconds is None  # for good


def test_pg_abort_round_trips_and_fires_only_at_a_reduction() -> None:
    """pg_abort's text form round-trips; at a site that reduces nothing it is refused."""
    schedule = Schedule.parse(ABORT)
    assert str(schedule.faults[0]) == ABORT
    assert Schedule.from_json(schedule.to_json()) == schedule
    for elsewhere in ("lightning.training_step", "dist.broadcast"):
        with pytest.raises(InvalidSchedule, match="it needs a reduction site"):
            Schedule.parse(f"pg_abort@{elsewhere}")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("seconds=-1", "seconds=-1 must be a positive number of seconds"),
        ("seconds=7200", "seconds=7200 must be at most 3600 seconds"),
        ("how=nap", "how='nap' is not one of stop, gil"),
    ],
)
def test_a_bad_freeze_is_refused_in_one_line(text: str, message: str) -> None:
    """Each bad parameter is named with its value and what it may be, on one line."""
    with pytest.raises(InvalidSchedule, match=message) as raised:
        Schedule.parse(f"freeze@lightning.training_step {text}")
    assert "\n" not in str(raised.value)


# -- traits -------------------------------------------------------------------------------
def test_a_freeze_is_refused_in_process_and_never_drawn_there() -> None:
    """A freeze would stop the pytest session: inject() refuses it, in-process searches
    skip both kinds (a pg_abort needs peers)."""
    with pytest.raises(InvalidSchedule, match="would kill this process"), chaoslight.inject(FREEZE):
        pass
    assert "freeze" not in IN_PROCESS_KINDS and "pg_abort" not in IN_PROCESS_KINDS


@settings(max_examples=60, database=None, deadline=None)
@given(fault=one_fault(faults=["pg_abort", "freeze"], world_size=2, steps=4))
def test_the_search_draws_aborts_at_reductions_and_freezes_anywhere(fault: object) -> None:
    """pg_abort is drawn only where a reduction runs (never Lightning's broadcast, whose
    errors Lightning swallows); a freeze lasts for good or half a second."""
    if isinstance(fault, PgAbort):
        assert REDUCTION in SITES[fault.site].capabilities, fault
    else:
        assert isinstance(fault, Freeze) and fault.seconds in (None, 0.5), fault


def test_the_default_search_draws_both_kinds() -> None:
    """A production job meets both: the default search draws them."""
    assert {"freeze", "pg_abort"} <= set(DEFAULT_KINDS)


# -- the actions, in a child process --------------------------------------------------------
def run_child(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh Python with chaoslight importable (10 s at most)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=10,
        env=env,
    )


def test_a_stop_freeze_resumes_after_its_seconds_and_leaves_no_helper() -> None:
    """SIGSTOP for 0.3 s: the process goes on after it, and the waking helper is gone."""
    done = run_child(
        """
        import os, time, psutil
        from chaoslight._runtime._halt import freeze
        start = time.monotonic()
        freeze(0.3, "stop")
        print(round(time.monotonic() - start, 1), len(psutil.Process().children()))
        """
    )
    assert done.returncode == 0, done.stderr
    waited, children = done.stdout.split()
    assert 0.3 <= float(waited) < 3.0 and children == "0"


def test_a_gil_freeze_stops_every_python_thread_of_the_rank() -> None:
    """Holding the GIL for 0.5 s, no other Python thread makes progress meanwhile."""
    done = run_child(
        """
        import threading, time
        from chaoslight._runtime._halt import freeze
        ticks = []
        def count():
            while True:
                ticks.append(time.monotonic())
                time.sleep(0.01)
        threading.Thread(target=count, daemon=True).start()
        time.sleep(0.1)
        start = time.monotonic()
        freeze(0.5, "gil")
        end = time.monotonic()
        print(sum(start + 0.05 < t < end - 0.05 for t in ticks))
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"


def test_an_abort_outside_a_group_is_the_marked_distributed_error() -> None:
    """With no process group the abort still yields the error an aborted group raises."""
    import torch.distributed as dist

    error = abort_group(ABORT)
    assert isinstance(error, dist.DistBackendError)
    assert ABORTED_GROUP_MARK in str(error) and ABORT in str(error)
    assert PgAbort(site="dist.all_reduce").surfaced_in(str(error))
    assert not PgAbort(site="dist.all_reduce").surfaced_in("Connection closed by peer")


# -- the wavefront: a rank frozen for good ----------------------------------------------------
def front(frozen_for: float | None = None, frozen: bool = False, seq: int = 8) -> Front:
    return Front(
        "dist.all_reduce", seq, 1, 2, BLOCKED_S + 0.1, frozen=frozen, frozen_for=frozen_for
    )


def decide_twice(states: list[RankState], now: float) -> object:
    decider = HangDecider()
    decider.decide(now, states)
    later = now + CONFIRM_S + 0.01
    fresh = [
        RankState(
            s.rank, s.pending, s.front, later if not (s.front and s.front.frozen) else s.front_at
        )
        for s in states
    ]
    return decider.decide(later, fresh)


def test_a_peer_waiting_for_a_rank_frozen_for_good_is_decided_at_once() -> None:
    """Rank 0 frozen for good, rank 1 blocked in a collective: a hang, named as such,
    and rank 1's evidence says its wait is bounded by the group's timeout."""
    states = [RankState(0, True, front(frozen=True), 1.0), RankState(1, True, front(), 100.0)]
    decision = decide_twice(states, 100.0)
    assert decision is not None
    assert "frozen for good" in decision.why(0)  # type: ignore[attr-defined]
    assert BOUNDED_WAIT in decision.why(1)  # type: ignore[attr-defined]


def test_a_short_freeze_decides_nothing() -> None:
    """A freeze that ends by itself is a straggler: its peers wait in the same collective."""
    states = [RankState(0, True, front(0.5, frozen=True), 1.0), RankState(1, True, front(), 100.0)]
    assert decide_twice(states, 100.0) is None


# -- the oracle on synthetic outcomes -------------------------------------------------------
def fired(rank: int, fault: str, step: int = 1) -> Event:
    return Event(FIRED, fault.split("@")[1].split()[0], rank, step, 1.0, 1.0, fault, 1)


def outcome(ranks: list[RankResult], events: list[Event]) -> Outcome:
    settled = settle(list(ranks))
    schedule = Schedule.parse("\n".join(e.fault for e in events))
    return Outcome(overall(settled), settled, list(events), 1.0, schedule, "t.py:f", 10.0)


def frozen_rank(rank: int) -> RankResult:
    return RankResult(
        rank, "hung", evidence=f"rank {rank} did not come back after the hang; killed"
    )


def test_a_peer_waiting_in_a_collective_for_a_frozen_rank_is_no_finding() -> None:
    """Frozen rank 0 and rank 1 hung in a collective the group's timeout bounds: every
    correct program does that."""
    waits = RankResult(1, "hung", evidence=f"rank 1 waits in dist.barrier #9; {BOUNDED_WAIT}")
    verdict = judge(outcome([frozen_rank(0), waits], [fired(0, FREEZE)]))
    assert not verdict.failed and verdict.rule == Rule.STALLED


def test_a_peer_waiting_with_no_deadline_for_a_frozen_rank_is_the_finding() -> None:
    """Rank 1 hung outside torch.distributed while rank 0 is frozen: the frozen rank is
    named as the cause, rank 1's wait as its consequence."""
    polls = RankResult(1, "hung", evidence="rank 1 is in lightning.on_train_epoch_end #1 (poll)")
    verdict = judge(outcome([frozen_rank(0), polls], [fired(0, FREEZE)]))
    assert verdict.failed and verdict.rule == Rule.STALLED
    assert verdict.reason.startswith(f"rank 0 was frozen by the injected {FREEZE} (the cause)")
    assert "consequence: rank 1 is in lightning.on_train_epoch_end" in verdict.reason
    assert "no deadline" in verdict.reason


def _failed(rank: int, kind: str, message: str) -> RankResult:
    frame = '  File "/home/me/train.py", line 7, in x\n'
    tb = f"Traceback (most recent call last):\n{frame}{kind}: {message}"
    return RankResult(rank, "failed", ExceptionInfo(kind, message, tb), ended_s=1.5)


def test_a_freeze_and_a_delay_of_the_same_length_get_the_same_verdict() -> None:
    """The same 1 s pause on rank 0, as a freeze its rank came back from and as a delay:
    rank 1 read the file rank 0 had not written yet (a race). Both fail, by the same rule:
    a pause a job rides out excuses nothing a straggler would not."""
    race = _failed(1, "FileNotFoundError", "[Errno 2] No such file or directory: 'stats-1.json'")
    released = RankResult(0, "failed", ExceptionInfo("RuntimeError", GLOO, "", True), ended_s=2.0)
    verdicts = []
    for kind in ("freeze", "delay"):
        pause = f"{kind}@lightning.on_validation_end rank=0 nth=2 seconds=1.0"
        verdicts.append(judge(outcome([released, race], [fired(0, pause)])))
    assert all(v.failed for v in verdicts), [v.reason for v in verdicts]
    assert verdicts[0].rule == verdicts[1].rule == BENIGN_RULE
    assert verdicts[0].reason == verdicts[1].reason
    assert "FileNotFoundError" in verdicts[0].reason


def test_under_a_freeze_for_good_a_peers_own_error_is_the_finding_its_timeout_is_not() -> None:
    """Rank 0 frozen for good. Rank 1 failing with an error no wait raised (it read what
    rank 0 never wrote) is the finding; rank 1 ending by its own deadline's timeout, or by
    the transport's error, is what a correct program does."""
    race = _failed(1, "FileNotFoundError", "no stats.json")
    verdict = judge(outcome([frozen_rank(0), race], [fired(0, FREEZE)]))
    assert verdict.failed and verdict.rule == Rule.STALLED
    assert "error no wait raised" in verdict.reason and "FileNotFoundError" in verdict.reason
    deadline = _failed(1, "TimeoutError", "rank 0 wrote no stats.json within 120 s")
    assert not judge(outcome([frozen_rank(0), deadline], [fired(0, FREEZE)])).failed


def test_a_peer_hung_inside_ddp_code_no_site_saw_is_no_finding() -> None:
    """Rank 1's main thread hung in DDP's own buffer sync (c10d called directly, no site
    saw it): a wait the group's timeout bounds; the same rank polling in its own code,
    with a store thread beside it in torch.distributed, is the finding."""

    def dump(innermost: str) -> str:
        store = (
            "Thread 0x2 (most recent call first):\n"
            '  File "/x/torch/distributed/rendezvous.py", line 5 in poll\n'
        )
        main = (
            "Thread 0x1 (most recent call first):\n"
            f"  {innermost}\n"
            '  File "/x/prog.py", line 9 in training_step\n'
            '  File "/x/chaoslight/_world/_worker.py", line 300 in main\n'
        )
        return f"{store}\n{main}"

    ddp = 'File "/x/torch/nn/parallel/distributed.py", line 1600 in _pre_forward'
    inside = RankResult(1, "hung", evidence="rank 1 stopped answering", stacks=dump(ddp))
    verdict = judge(outcome([frozen_rank(0), inside], [fired(0, FREEZE)]))
    assert not verdict.failed and verdict.rule == Rule.STALLED
    poll = 'File "/x/prog.py", line 12 in wait_for_flag'
    polls = RankResult(1, "hung", evidence="rank 1 is outside every site", stacks=dump(poll))
    assert judge(outcome([frozen_rank(0), polls], [fired(0, FREEZE)])).failed


def test_a_short_freeze_every_rank_rides_out_is_judged_as_a_delay() -> None:
    """Every rank passed after a half-second freeze: the pause its rank came back from is
    judged as a delay of the same length (benign: the run must pass, the checks hold)."""
    short = "freeze@lightning.training_step rank=0 seconds=0.5"
    ranks = [RankResult(0, "passed", ended_s=2.0), RankResult(1, "passed", ended_s=2.0)]
    verdict = judge(outcome(ranks, [fired(0, short)]))
    assert not verdict.failed and verdict.rule == BENIGN_RULE
    assert verdict.fired == ((0, short),)  # reported as the freeze it was
    drift = Violation("replicas-in-sync", "parameter 'w' differs", rank=1, step=3)
    broken = judge(replace(outcome(ranks, [fired(0, short)]), violations=(drift,)))
    assert broken.failed and broken.rule == BENIGN_RULE


def aborted(rank: int, text: str) -> RankResult:
    info = ExceptionInfo("DistBackendError", text, f"Traceback:\nDistBackendError: {text}", True)
    return RankResult(rank, "failed", info, ended_s=1.0)


def test_a_rank_that_ends_by_its_aborted_group_fails_cleanly() -> None:
    """The aborted rank raises the marked error, its peer the transport error: clean."""
    ranks = [aborted(0, "Connection closed by peer"), aborted(1, f"{ABORTED_GROUP_MARK} ({ABORT})")]
    verdict = judge(outcome(ranks, [fired(1, ABORT, step=2)]))
    assert not verdict.failed and verdict.rule == FAILED_CLEANLY


def test_an_error_caught_by_design_before_a_peers_abort_released_the_rank_is_no_swallow() -> None:
    """Found by the default search on ``examples/shapes/caught_bad_record.py`` (a correct
    program that catches a bad record's JSONDecodeError and trains on): rank 0 caught its
    injected error at step 0 and went on; at step 3 rank 1 aborted its group and ended by
    it, which released rank 0 with gloo's transport error. That failure is the peer's
    consequence, not the caught error's."""
    caught = "raise@lightning.forward rank=0 step=0 exception=json.decoder:JSONDecodeError"
    abort = "pg_abort@dist.all_reduce rank=1 step=3"
    ranks = [aborted(0, "Connection closed by peer"), aborted(1, f"{ABORTED_GROUP_MARK} ({abort})")]
    verdict = judge(outcome(ranks, [fired(0, caught, step=0), fired(1, abort, step=3)]))
    assert not verdict.failed, verdict.reason
    assert verdict.rule == FAILED_CLEANLY


def test_a_rank_that_swallows_its_aborted_group_and_fails_later_is_found() -> None:
    """The aborted rank caught the abort and failed later in another collective: swallowed."""
    ranks = [aborted(0, "Connection closed by peer"), aborted(1, "Connection closed by peer")]
    verdict = judge(outcome(ranks, [fired(1, ABORT, step=2)]))
    assert verdict.failed and verdict.rule == SWALLOWED
    assert f"rank 1 swallowed the injected {ABORT}" in verdict.reason


# -- in a World (slow: each example is a real 2-rank fit) ---------------------------------------
POLL = f"{ROOT}/examples/bugs/frozen_peer_poll.py"
SWALLOW = f"{ROOT}/examples/bugs/swallowed_abort.py"


def stopped_or_waking(world: chaoslight.World) -> list[str]:
    """The World's processes, and theirs, that are stopped or still wake a stopped rank."""
    import psutil

    found = []
    for pid in world.processes:
        try:
            family = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for proc in family:
            try:
                if proc.status() == psutil.STATUS_STOPPED or "SIGCONT" in " ".join(proc.cmdline()):
                    found.append(f"{proc.pid} {proc.status()} {proc.cmdline()[:3]}")
            except psutil.NoSuchProcess:
                continue
    return found


@pytest.mark.slow
@pytest.mark.parametrize("how", ["stop", "gil"])
def test_a_rank_frozen_for_good_is_decided_early_and_leaves_nothing_behind(
    world2: chaoslight.World, how: str
) -> None:
    """Rank 0 frozen for good while rank 1 waits in a barrier: no finding, decided long
    before the timeout, no stopped process or helper left, and the World goes on."""
    fault = FREEZE if how == "stop" else f"{FREEZE} how={how}"  # stop: the default, unwritten
    outcome = world2.run(f"{POLL}:train_fixed", fault, timeout=20)
    verdict = judge(outcome)
    assert not verdict.failed, verdict.reason
    assert verdict.fired == ((0, fault),)
    assert outcome.wall_s < 10  # the wavefront, not the 20 s timeout
    assert stopped_or_waking(world2) == []
    assert world2.run(f"{POLL}:train_fixed", timeout=20).status == "passed"


@pytest.mark.slow
def test_a_peer_waiting_on_an_async_collective_for_a_frozen_rank_is_a_consequence(
    world2: chaoslight.World,
) -> None:
    """``work.wait()`` is C++: the wait's frame is chaoslight's marking wrapper, so the
    peer reads as waiting in torch.distributed, not as polling with no deadline (a false
    alarm of the budget campaign on catalogue/unsynchronised_async:train_fixed). Once the
    site has returned none is in progress: the wavefront still sees a wait in a collective
    beside a rank frozen for good, and decides in about a second, not at the timeout."""
    target = f"{ROOT}/tests/freeze_abort_targets.py:reduce_async"
    fault = "freeze@dist.all_reduce rank=0"
    outcome = world2.run(target, fault, timeout=20)
    assert outcome.status == "hung" and outcome.wall_s < 10, outcome.report()
    verdict = judge(outcome)
    assert not verdict.failed, verdict.reason
    assert verdict.fired == ((0, fault),)
    assert stopped_or_waking(world2) == []


@pytest.mark.slow
def test_a_short_freeze_is_ridden_out(world2: chaoslight.World) -> None:
    """A rank stopped for half a second resumes; the job passes and no helper is left."""
    fault = "freeze@lightning.training_step rank=1 step=3 seconds=0.5"
    outcome = world2.run(f"{POLL}:train_buggy", fault, timeout=20)
    assert outcome.status == "passed" and not judge(outcome).failed
    assert stopped_or_waking(world2) == []


@pytest.mark.slow
def test_a_peer_polling_with_no_deadline_for_a_frozen_rank_is_found(
    world2: chaoslight.World,
) -> None:
    """The planted bug: rank 1 polls forever for the file frozen rank 0 never writes."""
    outcome = world2.run(f"{POLL}:train_buggy", FREEZE, timeout=4)
    verdict = judge(outcome)
    assert verdict.failed and verdict.rule == Rule.STALLED
    assert verdict.reason.startswith(f"rank 0 was frozen by the injected {FREEZE}")
    assert "consequence: rank 1" in verdict.reason and "no deadline" in verdict.reason


@pytest.mark.slow
def test_an_aborted_group_fails_the_fixed_twin_cleanly_and_is_found_swallowed(
    world2: chaoslight.World,
) -> None:
    """The abort ends the rank that lets it raise; the one that catches it is found."""
    fixed = judge(world2.run(f"{SWALLOW}:train_fixed", ABORT, timeout=20))
    assert not fixed.failed and fixed.rule == FAILED_CLEANLY and fixed.fired == ((1, ABORT),)
    buggy = judge(world2.run(f"{SWALLOW}:train_buggy", ABORT, timeout=20))
    assert buggy.failed and buggy.rule == SWALLOWED
    assert f"rank 1 swallowed the injected {ABORT} and failed later" in buggy.reason


@pytest.mark.slow
def test_a_group_aborted_under_a_program_that_catches_everything_is_made_afresh(
    world2: chaoslight.World,
) -> None:
    """Every rank caught the abort and returned; the next example still has a working group."""
    targets = f"{ROOT}/tests/freeze_abort_targets.py"
    caught = world2.run(f"{targets}:reduce_catching_errors", "pg_abort@dist.all_reduce rank=1")
    assert [r.value for r in caught.ranks] == ["caught RuntimeError", "caught DistBackendError"]
    after = world2.run(f"{targets}:reduce_once")
    assert after.status == "passed" and [r.value for r in after.ranks] == [2.0, 2.0]
