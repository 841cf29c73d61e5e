"""Hard crashes that leave no Python exception (a real segfault, ``abort()``), and a
preemption's SIGTERM to the rank's whole process group (its DataLoader workers with it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import ddp_target
from hypothesis import find

from chaoslight import (
    Crash,
    Event,
    InvalidArgument,
    Outcome,
    Preempt,
    Schedule,
    World,
    judge,
)
from chaoslight._report._outcome import overall, settle
from chaoslight._report._records import ExceptionInfo, RankResult
from chaoslight._report._text import death_line
from chaoslight._runtime import FIRED, NOTE
from chaoslight._search._strategies import preemptions
from chaoslight._verdict._known import match_known
from chaoslight.strategies import crashes, schedules

SITE = "lightning.training_step"
ROOT = Path(__file__).resolve().parents[1]
WORKERS_PAIR = str(ROOT / "examples" / "bugs" / "emergency_save_workers.py")
TIMEOUT = 60.0


def python(code: str, cwd: Path, **options: Any) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter that may dump core into ``cwd`` if let."""

    def allow_core_files() -> None:
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_CORE)
        resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))

    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=allow_core_files,
        check=False,
        **options,
    )


# -- the faults' forms and the search -----------------------------------------------


def test_crash_signals_and_group_preemption_have_text_forms_that_round_trip() -> None:
    """crash@... signal=11 and preempt@... group=true print and parse back."""
    faults = [
        Crash(site=SITE, rank=1, step=2, signal=signal.SIGSEGV),
        Crash(site=SITE, rank=0, signal=signal.SIGABRT),
        Preempt(site=SITE, rank=1, step=2, group=True),
    ]
    assert [str(f) for f in faults] == [
        f"crash@{SITE} rank=1 step=2 signal=11",
        f"crash@{SITE} rank=0 signal=6",
        f"preempt@{SITE} rank=1 step=2 group=true",
    ]
    assert Schedule.parse("\n".join(map(str, faults))).faults == tuple(faults)
    assert Schedule.from_json(Schedule(faults).to_json()).faults == tuple(faults)


@pytest.mark.parametrize("group", ["yes", 1, None])
def test_preempt_refuses_a_group_that_is_not_true_or_false(group: Any) -> None:
    """group= must be a bool; the error names the argument and the value."""
    with pytest.raises(InvalidArgument, match=r"group=.* must be True or False"):
        Preempt(site=SITE, group=group)


def test_crashes_draw_segfault_and_abort_and_shrink_to_sigkill() -> None:
    """The default crash strategy draws SIGSEGV and SIGABRT, and shrinks to SIGKILL."""
    strategy = crashes(world_size=2, sites=[SITE])
    assert find(strategy, lambda fault: True).signal == signal.SIGKILL
    assert find(strategy, lambda fault: fault.signal == signal.SIGSEGV).signal == 11
    assert find(strategy, lambda fault: fault.signal == signal.SIGABRT).signal == 6


def test_preemptions_draw_group_signals_and_shrink_to_the_rank_alone() -> None:
    """Preemptions draw group=True; a shrunk one signals the rank alone."""
    strategy = preemptions(world_size=2, sites=[SITE])
    assert find(strategy, lambda fault: True).group is False
    assert find(strategy, lambda fault: fault.group).group is True


def test_default_search_draws_a_segfault_and_a_group_preemption() -> None:
    """A search given no faults=[...] draws both new shapes."""
    drawn = schedules(world_size=2)
    segfault = find(drawn, lambda s: any(getattr(f, "signal", 0) == 11 for f in s))
    group = find(drawn, lambda s: any(getattr(f, "group", False) for f in s))
    assert "signal=11" in segfault.to_text() and "group=true" in group.to_text()


# -- a real native crash -------------------------------------------------------------


@pytest.mark.parametrize(
    ("signum", "words"),
    [(11, "Segmentation fault"), (6, "Aborted"), (7, "Bus error")],
)
def test_hard_crash_dies_natively_with_faulthandler_dump_and_no_core_file(
    tmp_path: Path, signum: int, words: str
) -> None:
    """The process dies of the signal, faulthandler's dump says so, no core file is left."""
    done = python(
        f"""
        import faulthandler
        faulthandler.enable()
        from chaoslight._runtime._hard_crash import die_of
        die_of({signum})
        print("survived")
        """,
        tmp_path,
    )
    assert done.returncode == -signum, done.stderr
    assert f"Fatal Python error: {words}" in done.stderr
    assert "survived" not in done.stdout
    assert list(tmp_path.iterdir()) == []  # no core file, even where the limit allows one


@pytest.mark.slow
@pytest.mark.parametrize("signum", [11, 6])
def test_a_python_handler_cannot_turn_an_injected_hard_crash_into_an_exception(
    tmp_path: Path, signum: int
) -> None:
    """A program's Python handler for the signal never sees an exception: the rank dies."""
    done = python(
        f"""
        import signal, torch, chaoslight
        def to_exception(signum, frame):
            raise RuntimeError("caught a crash")
        signal.signal({signum}, to_exception)
        try:
            with chaoslight.inject("crash@torch.save signal={signum}", allow_crash=True):
                torch.save({{"w": torch.ones(1)}}, "model.pt")
        except BaseException as error:
            print("caught", type(error).__name__)
        """,
        tmp_path,
    )
    assert done.returncode == -signum, (done.stdout, done.stderr)
    assert "caught" not in done.stdout
    assert not any(path.name.startswith("core") for path in tmp_path.iterdir())


# -- how a death reads ---------------------------------------------------------------


def fired(rank: int, fault: str, step: int = 3) -> Event:
    return Event(FIRED, SITE, rank, step, 1.0, 1.0, fault, 1)


def test_death_line_names_the_signal_and_the_injected_crash_cause_first() -> None:
    """ "rank 1 died of SIGSEGV (signal 11): the injected crash@... fired at step 3"."""
    crash = f"crash@{SITE} rank=1 step=3 signal=11"
    assert death_line(1, -11, "", [fired(1, crash)]) == (
        f"rank 1 died of SIGSEGV (signal 11): the injected {crash} fired at step 3"
    )
    # A death by another signal than the fault's is not blamed on the fault.
    delay = f"delay@{SITE} rank=1 step=3"
    output = "noise\n  what():  Is there a distributed collective mismatch\n"
    line = death_line(1, -6, output, [fired(1, delay)])
    assert line.startswith(f"rank 1 died of SIGABRT (signal 6) after {delay} fired at step 3")
    assert line.endswith("its output says: what():  Is there a distributed collective mismatch")
    assert death_line(0, -9, "", []) == "rank 0 died of SIGKILL (signal 9)"


@pytest.mark.parametrize(("signum", "status"), [(11, 139), (6, 134), (9, 137)])
def test_a_hard_crash_exits_as_a_shell_reports_it(signum: int, status: int) -> None:
    """A launcher sees 128 + N for signal N: 139 for a segfault, 134 for an abort."""
    rank = RankResult(1, "crashed", signal=signum)
    assert rank.exit_status == status
    assert f"(signal {signum})" in settle([rank])[0].evidence


# -- the process-group SIGTERM -------------------------------------------------------

TARGETS = """
    import os, signal, time
    from chaoslight._runtime._group import group_targets, ignores_sigterm, send_from_outside
    child = os.fork()
    if child == 0:
        if os.environ.get("SHIELD"):
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(30)
        os._exit(0)
    time.sleep(0.3)
    heard = []
    signal.signal(signal.SIGTERM, lambda *_: heard.append(1))
    targets = group_targets()
    print("group" if targets.group is not None else "narrowed", targets.words)
    print("shielded", ignores_sigterm(child))
    send_from_outside(targets)
    time.sleep(0.1)
    _, status = os.waitpid(child, os.WNOHANG)
    print("rank heard", heard, "child", status & 0x7F if status else "alive")
    if status == 0:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
"""


def test_group_sigterm_reaches_the_rank_and_its_children_from_outside(tmp_path: Path) -> None:
    """A rank that leads its group: it and its child get SIGTERM, nothing else does."""
    done = python(TARGETS, tmp_path, start_new_session=True)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("group and its process group (pgid ")
    assert lines[1] == "shielded False"
    assert lines[2] == f"rank heard [1] child {signal.SIGTERM}"


def test_group_sigterm_narrows_to_the_rank_where_the_group_is_not_its_own(
    tmp_path: Path,
) -> None:
    """In pytest's own group only the rank and its children are signalled, and it says so;
    a child that ignores SIGTERM lives on."""
    done = python(TARGETS, tmp_path, env={**os.environ, "SHIELD": "1"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("narrowed and the 1 process it started (narrowed: its process")
    assert "is not the rank's own" in lines[0]
    assert lines[1] == "shielded True"
    assert lines[2] == "rank heard [1] child alive"


PREEMPT = f"preempt@{SITE} step=2 group=true"
WORKER_DIED = "DataLoader worker (pid 4242) is killed by signal: Terminated. "


def group_preempted(handler: str, error: str = WORKER_DIED, fault: str = PREEMPT) -> Outcome:
    """Both ranks sent a group SIGTERM at step 2; rank 0 failed with ``error``."""
    events = []
    for rank in (0, 1):
        to = f"rank {rank} and its process group"
        detail = f"SIGTERM delivered to {to} at step 2; handled by {handler}"
        events += [fired(rank, fault, 2), Event(NOTE, SITE, rank, 2, 1.1, 1.1, fault, 0, detail)]
    info = ExceptionInfo(
        "RuntimeError", error, f"Traceback (most recent call last):\nRuntimeError: {error}"
    )
    ranks = settle(
        [
            RankResult(0, "failed", info, ended_s=1.2),
            RankResult(
                1,
                "failed",
                ExceptionInfo("RuntimeError", "Connection closed by peer", "tb", True),
                ended_s=1.3,
            ),
        ]
    )
    return Outcome(overall(ranks), ranks, events, 1.5, Schedule.parse(fault), "t.py:f", 5.0)


def test_workers_killed_by_a_group_sigterm_after_lightnings_handler_is_a_known_issue() -> None:
    """Lightning's handler took it and the loader raised: Lightning's, reported apart."""
    outcome = group_preempted("lightning (pytorch-lightning 2.6.6)")
    verdict = judge(outcome)
    assert verdict.failed
    claim = match_known(outcome)
    assert claim is not None
    issue, package, version = claim.issue, claim.package, claim.version
    assert issue.key == "lightning-sigterm-dataloader-workers"
    assert (package, version) == ("pytorch-lightning", "2.6.6")
    assert "worker_init_fn" in issue.workaround


def test_workers_killed_after_the_programs_own_handler_is_the_programs_bug() -> None:
    """The program's own emergency stop lost to its workers' death is a finding, with why."""
    verdict = judge(group_preempted("the program"))
    assert verdict.failed and verdict.known is None
    assert "rank 0 did not stop cleanly" in verdict.reason
    assert "Usual cause: the SIGTERM reached the DataLoader workers too" in verdict.reason


def test_a_rank_alone_signal_is_not_the_workers_known_issue() -> None:
    """Without group=true the workers were not signalled: the signature does not match."""
    outcome = group_preempted("lightning (pytorch-lightning 2.6.6)", fault=f"preempt@{SITE} step=2")
    found = match_known(outcome)
    assert found is None or found.issue.key != "lightning-sigterm-dataloader-workers"
    assert "DataLoader workers too" not in judge(outcome).reason


# -- in a World ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "status", "words"), [(11, 139, "Segmentation fault"), (6, 134, "Aborted")]
)
def test_world_names_a_hard_crash_and_replaces_its_slot(
    world2: World, signum: int, status: int, words: str
) -> None:
    """A rank killed by a real segfault or abort: crashed, 139/134, the signal named in
    its evidence and its faulthandler dump; the next example runs on a fresh slot."""
    crash = f"crash@{SITE} rank=1 step=1 signal={signum}"
    outcome = world2.run(ddp_target("plain"), crash, timeout=TIMEOUT)
    rank = outcome.ranks[1]
    assert rank.status == "crashed" and rank.signal == signum, outcome.report()
    assert rank.exit_status == status
    assert signal.Signals(signum).name in rank.evidence
    assert f"Fatal Python error: {words}" in (rank.output or "")
    assert outcome.ranks[0].status == "released"
    assert not judge(outcome).failed  # a crash the job failed cleanly by
    assert world2.run(ddp_target("plain"), timeout=TIMEOUT).passed


@pytest.mark.slow
def test_world_rank_leads_its_own_process_group(world2: World) -> None:
    """Each rank slot leads its own group: a group SIGTERM never reaches the World."""
    outcome = world2.run(f"{Path(__file__).resolve()}:process_group_of_rank", timeout=TIMEOUT)
    assert outcome.passed, outcome.report()
    groups = [rank.value for rank in outcome.ranks]
    assert all(leads for leads, _ in groups)
    assert len({pgid for _, pgid in groups} | {os.getpgid(0)}) == 3


def process_group_of_rank() -> tuple[bool, int]:
    """In a rank: whether it leads its process group, and the group."""
    return os.getpgid(0) == os.getpid(), os.getpgid(0)


@pytest.mark.slow
def test_world_emergency_save_lost_to_its_workers_is_found_and_its_twin_is_clean() -> None:
    """Group SIGTERM at step 2: the buggy program's workers die before its checkpoint;
    the twin whose workers ignore SIGTERM saves and exits 143. (A World of its own: its
    ranks have run no DataLoader workers before, as a fresh job's have not.)"""
    with World(size=2) as world:
        buggy = judge(world.run(f"{WORKERS_PAIR}:train_buggy", PREEMPT, timeout=TIMEOUT))
        fixed = world.run(f"{WORKERS_PAIR}:train_fixed", PREEMPT, timeout=TIMEOUT)
    assert buggy.failed and buggy.known is None, buggy.reason
    assert "DataLoader worker" in buggy.reason and "Usual cause" in buggy.reason
    assert not judge(fixed).failed, fixed.report()
    assert all(rank.exit_status == 143 for rank in fixed.ranks)
