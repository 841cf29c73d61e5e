"""chaoslight.World: real 2-rank DDP fits over gloo, example after example, in one pool."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

import chaoslight
from chaoslight import ChaosError, Event, InvalidArgument, Outcome, World
from chaoslight._report._outcome import overall, settle
from chaoslight._report._text import death_line
from chaoslight._world import ExceptionInfo, RankResult, _ranks
from chaoslight._world._forkserver import supported as forkserver_supported
from chaoslight._world._slot import Slot, WorkersDidNotStart, worker_environment
from chaoslight._world._target import parse_target
from chaoslight._world._wire import Inited, Store

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = f"{ROOT}/examples/ddp_train.py:train"
TARGETS = f"{ROOT}/tests/world_targets.py"
TIMEOUT = 2.0
SLACK = 15.0  # a hang is reported within the timeout plus this (wide: CI machines are busy)


def target(name: str) -> str:
    """A target from tests/world_targets.py, by absolute path."""
    return f"{TARGETS}:{name}"


def raise_on_rank_1(step: int = 1) -> chaoslight.Schedule:
    """A RuntimeError raised in rank 1's training_step at ``step``."""
    fault = chaoslight.Raise(site="lightning.training_step", rank=1, step=step)
    return chaoslight.Schedule([fault])


def crash_rank_1() -> chaoslight.Schedule:
    """Rank 1 SIGKILLed at its training_step of step 1."""
    return chaoslight.Schedule([chaoslight.Crash(site="lightning.training_step", rank=1, step=1)])


def drop_all_reduce() -> chaoslight.Schedule:
    """Rank 1 skips the all-reduce of a sync_dist log at step 1."""
    return chaoslight.Schedule([chaoslight.DropSync(site="dist.all_reduce", rank=1, step=1)])


def sessions_alive(sessions: set[int]) -> list[int]:
    """Processes (zombies included) whose session is one of ``sessions``, from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) in sessions:
            found.append(int(stat.parent.name))
    return found


def _state(pid: int) -> str:
    """The process's state letter (``R``, ``S``, ``Z``...), or ``gone``, from /proc."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def children() -> list[int]:
    """This process's child processes (zombies included), from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            found.append(int(stat.parent.name))
    return found


@pytest.fixture
def world(world2: World) -> World:
    """The session's 2-rank World (a World's start costs seconds: one for the suite)."""
    return world2


# -- without processes ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nofile.py:f", "no such file 'nofile.py'"),
        ("x", "must be 'path/file.py:function' or 'package.module:function'"),
        ("pkg.mod:", "is not a function name"),
        ("examples/ddp_train.py:1bad", "is not a function name"),
        ("a-b.c:f", "neither a .py file nor a module name"),
    ],
)
def test_parse_target_refuses_bad_forms(text: str, message: str) -> None:
    """Malformed targets fail in the parent with a one-line InvalidArgument."""
    with pytest.raises(InvalidArgument, match=message) as caught:
        parse_target(text, cwd=ROOT)
    assert "\n" not in str(caught.value)


def test_parse_target_resolves_paths_and_modules() -> None:
    """A path target becomes absolute; a module target keeps its dotted name."""
    by_path = parse_target("examples/ddp_train.py:train", cwd=ROOT)
    assert by_path.path == str(ROOT / "examples" / "ddp_train.py")
    assert by_path.function == "train"
    by_module = parse_target("chaoslight._schedule._model:Schedule.parse")
    assert (by_module.module, by_module.function, by_module.path) == (
        "chaoslight._schedule._model",
        "Schedule.parse",
        None,
    )


def test_settle_marks_consequential_errors_released() -> None:
    """A gloo error in one rank caused by another rank's failure is 'released', not a cause."""
    gloo = ExceptionInfo("RuntimeError", "Connection closed by peer", distributed=True)
    cause = ExceptionInfo("ValueError", "bad batch")
    ranks = settle([RankResult(1, "failed", cause), RankResult(0, "failed", gloo)])
    assert [r.status for r in ranks] == ["released", "failed"]
    assert ranks[0].evidence.startswith("rank 0 was released: RuntimeError")
    assert overall(ranks) == "failed"
    alone = settle([RankResult(0, "failed", gloo), RankResult(1, "failed", gloo)])
    assert [r.status for r in alone] == ["failed", "failed"]


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        (("passed", "passed"), "passed"),
        (("passed", "failed"), "failed"),
        (("released", "hung"), "hung"),
        (("hung", "crashed"), "crashed"),
        (("released", "crashed"), "crashed"),
    ],
)
def test_overall_status_is_the_most_severe(statuses: tuple[str, str], expected: str) -> None:
    """crashed > hung > failed (or released) > passed."""
    ranks = tuple(RankResult(rank, status) for rank, status in enumerate(statuses))
    assert overall(ranks) == expected


def test_crash_line_names_signal_fault_and_fatal_message() -> None:
    """A crashed rank's evidence names its signal, the fault that fired, and gloo's message."""
    fired = Event(
        "fired",
        "lightning.training_step",
        1,
        1,
        0.0,
        0.0,
        "crash@lightning.training_step rank=1 step=1",
    )
    line = death_line(1, -9, "", [fired])
    assert line == (
        "rank 1 died of SIGKILL (signal 9): the injected crash@lightning.training_step "
        "rank=1 step=1 fired at step 1"
    )
    output = "noise\n  what():  Is there a distributed collective mismatch\n"
    aborted = death_line(0, -6, output, [])
    assert "SIGABRT" in aborted and "collective mismatch" in aborted


def test_outcome_summary_lists_ranks_that_did_not_pass() -> None:
    """The summary is one line: status, time, then each non-passing rank's evidence."""
    ranks = settle(
        [
            RankResult(0, "passed", value_repr="3"),
            RankResult(1, "hung", evidence="rank 1 waits in dist.barrier #3"),
        ]
    )
    outcome = Outcome("hung", ranks, wall_s=2.5)
    assert str(outcome) == "hung in 2.50 s: rank 1 waits in dist.barrier #3"
    assert outcome.evidence == {0: "rank 0 returned 3", 1: "rank 1 waits in dist.barrier #3"}


class _Rank0:
    """A worker slot that only records the commands it is sent."""

    rank, dead, sent = 0, False, 0

    def send(self, message: object) -> None:
        self.sent += 1


def test_a_world_of_one_keeps_rank_zeros_inited_read_with_its_store(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Rank 0 of a World of one answers its store's port and Inited back to back: read in
    one pass, the group is made (it used to say "could not create its process group:
    None" whenever both came together, as on a fast GPU host)."""
    ranks = _ranks.Ranks(1, 0, sys.executable, {}, tmp_path, start_timeout=5.0)
    slot = _Rank0()
    ranks.slots = [slot]  # type: ignore[list-item]
    batches = iter([[(slot, Store(1, port=4242)), (slot, Inited(1))]])
    monkeypatch.setattr(_ranks, "pump", lambda selector, until: next(batches, []))
    ranks._try_init(timeout=5.0)
    assert ranks.group_ok and slot.sent == 1


def test_world_validates_its_arguments() -> None:
    """A bad size fails before any process starts."""
    with pytest.raises(InvalidArgument, match="size=0 must be at least 1"):
        World(size=0)


# -- real 2-rank DDP -----------------------------------------------------------------------
@pytest.mark.slow
def test_passing_example_returns_each_ranks_value(world: World) -> None:
    """A clean fit passes in both ranks, with bit-identical weights."""
    outcome = world.run(EXAMPLE, timeout=TIMEOUT)
    assert outcome.status == "passed", outcome.report()
    assert [r.status for r in outcome.ranks] == ["passed", "passed"]
    assert outcome.ranks[0].value == outcome.ranks[1].value
    assert len(outcome.ranks[0].value) == 5
    assert outcome.events == []


@pytest.mark.slow
def test_a_thread_an_example_left_behind_writes_into_the_worlds_folder(world: World) -> None:
    """Between examples the ranks wait in the World's own folder: a leftover thread's
    relative write lands there, never in the directory the World was started from."""
    stray = Path.cwd() / "stray.txt"
    assert world.run(target("leaves_a_writer_behind"), timeout=TIMEOUT).passed
    time.sleep(1.0)
    try:
        assert not stray.exists()
    finally:
        stray.unlink(missing_ok=True)


@pytest.mark.slow
def test_a_rank_whose_example_left_program_code_running_is_replaced(world: World) -> None:
    """A thread the example started that still runs the program's code after a grace is
    never let into the next example: that rank process is replaced, and the late write
    lands in no later example's directory (a false alarm on a correct program once)."""
    first = world.run(target("leaves_a_late_writer_behind"), timeout=TIMEOUT)
    assert first.passed, first.report()
    later = world.run(target("files_after_a_while"), timeout=10.0)
    assert later.passed, later.report()
    assert [r.value for r in later.ranks] == [[], []]
    assert {r.pid for r in later.ranks}.isdisjoint(r.value for r in first.ranks)


@pytest.mark.slow
def test_ranks_run_as_under_torchrun_so_a_second_fit_is_distributed_too(world: World) -> None:
    """Lightning sees torchrun (TorchElasticEnvironment), which keeps WORLD_SIZE when a fit
    ends: a second Trainer built from it runs on both ranks again, not alone."""
    outcome = world.run(target("fit_twice_from_the_environment"), timeout=TIMEOUT)
    assert outcome.status == "passed", outcome.report()
    for result in outcome.ranks:
        assert result.value == [("TorchElasticEnvironment", 2, 4)] * 2, result.value


@pytest.mark.slow
def test_raise_on_one_rank_fails_and_releases_the_other(world: World) -> None:
    """Rank 1 raises in training_step; rank 0, waiting in a collective, is let go at once."""
    outcome = world.run(EXAMPLE, raise_on_rank_1(), timeout=30)
    assert outcome.status == "failed", outcome.report()
    failed, released = outcome.ranks[1], outcome.ranks[0]
    assert failed.status == "failed" and failed.exception is not None
    assert (failed.exception.module, failed.exception.type, failed.exception.message) == (
        "builtins",
        "RuntimeError",
        "injected by chaoslight",
    )
    assert str(failed.exception) == "RuntimeError: injected by chaoslight"
    assert "training_step" in failed.exception.traceback
    assert released.status == "released" and released.exception is not None
    assert released.exception.distributed
    assert outcome.wall_s < 30 / 2  # released, not timed out (the timeout is 30 s)
    assert [(e.kind, e.rank, e.step) for e in outcome.events] == [("fired", 1, 1)]
    assert world.run(EXAMPLE, timeout=TIMEOUT).passed


@pytest.mark.slow
def test_dropped_collective_hangs_with_both_ranks_blocked_sites(world: World) -> None:
    """A skipped all-reduce desyncs the ranks: hung, each rank's collective named."""
    outcome = world.run(target("log_at_batch_end"), drop_all_reduce(), timeout=TIMEOUT)
    assert outcome.status == "hung", outcome.report()
    assert outcome.wall_s <= TIMEOUT + SLACK
    assert [r.status for r in outcome.ranks] == ["hung", "hung"]
    rank0, rank1 = outcome.evidence[0], outcome.evidence[1]
    assert rank0.startswith("rank 0 waits in dist.all_reduce #")
    assert "on_train_batch_end → self.log(" in rank0 and "sync_dist=True" in rank0
    assert rank1.startswith("rank 1 waits in dist.broadcast #")
    for result in outcome.ranks:
        assert "Thread" in result.stacks and "world_targets.py" in result.stacks
    assert [(e.kind, e.site, e.rank) for e in outcome.events] == [("fired", "dist.all_reduce", 1)]
    assert world.run(EXAMPLE, timeout=TIMEOUT).passed


@pytest.mark.slow
def test_dropped_all_reduce_before_the_gradient_sync_aborts_the_peer(world: World) -> None:
    """Under gloo, a skipped all-reduce met by DDP's larger one aborts the receiver."""
    outcome = world.run(EXAMPLE, drop_all_reduce(), timeout=TIMEOUT)
    assert outcome.status == "crashed", outcome.report()
    crashed = [r for r in outcome.ranks if r.status == "crashed"]
    assert [r.signal for r in crashed] == [signal.SIGABRT]
    assert "collective mismatch" in crashed[0].evidence
    assert world.run(EXAMPLE, timeout=TIMEOUT).passed


@pytest.mark.slow
def test_killed_rank_is_crashed_and_the_other_released(world: World) -> None:
    """A Crash fault SIGKILLs rank 1; rank 0 is released and the World replaces rank 1."""
    before = world.start(timeout=TIMEOUT).pids  # and the spare is ready
    outcome = world.run(EXAMPLE, crash_rank_1(), timeout=30)
    assert outcome.status == "crashed", outcome.report()
    assert outcome.ranks[1].status == "crashed" and outcome.ranks[1].signal == signal.SIGKILL
    assert outcome.evidence[1].startswith("rank 1 died of SIGKILL (signal 9): the injected crash@")
    assert outcome.ranks[0].status == "released"
    assert outcome.wall_s < 30 / 2  # released, not timed out
    assert [(e.kind, e.rank) for e in outcome.events] == [("fired", 1)]
    after = world.pids
    assert after[0] == before[0] and after[1] != before[1]
    assert world.run(EXAMPLE, timeout=TIMEOUT).passed  # a warm spare took rank 1's place


TORN_LOG = """
import os, pathlib, signal
import torch.distributed as dist

def torn():
    dist.barrier()
    if dist.get_rank() == 1:  # as if SIGKILLed while writing an event: half a line
        log = pathlib.Path.cwd().parent / "rank1.events.jsonl"
        if not log.is_file():  # the rank's own log, which holds the Delay's event
            raise FileNotFoundError(log)
        with open(log, "a") as file:
            file.write('{"kind": "fired", "si')
        os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow
def test_a_rank_log_cut_mid_line_by_a_kill_yields_its_complete_events(
    world: World, tmp_path: Path
) -> None:
    """Rank 1 dies mid-line in its event log: the outcome has its events, and no note."""
    (tmp_path / "torn.py").write_text(TORN_LOG)
    delay = chaoslight.Delay(site="dist.barrier", rank=1, seconds=0.01)
    outcome = world.run(f"{tmp_path}/torn.py:torn", chaoslight.Schedule([delay]), timeout=30)
    assert outcome.status == "crashed", outcome.report()
    assert [(e.kind, e.rank, e.site) for e in outcome.events] == [("fired", 1, "dist.barrier")]


@pytest.mark.slow
def test_a_messy_target_does_not_poison_the_next_example(world: World) -> None:
    """Destroyed group, dtype, threads, cwd, files, env (WORLD_SIZE too), RNG, signal
    handlers, faulthandler's abort handler (a fit's teardown removes it): all put back;
    gloo uses the loopback interface."""
    first = world.run(target("state"), timeout=TIMEOUT)
    messy = world.run(target("leaves_a_mess"), timeout=TIMEOUT)
    assert messy.status == "passed" and messy.ranks[0].value == "messy", messy.report()
    after = world.run(target("state"), timeout=TIMEOUT)
    assert after.status == "passed", after.report()
    seen = after.ranks[0].value
    assert seen == {
        "dtype": "torch.float32",
        "threads": 1,
        "group": True,
        "files": [],
        "cwd_is_tmpdir": True,
        "env": None,
        "world_size": "2",
        "rand": first.ranks[0].value["rand"],
        "handlers": first.ranks[0].value["handlers"],
        "gloo_interface": os.environ.get("GLOO_SOCKET_IFNAME", "lo"),
        "abort_dumps": True,
    }
    assert "_leftover_handler" not in seen["handlers"]


@pytest.mark.slow
def test_return_values_that_do_not_pickle_come_back_as_repr(world: World) -> None:
    """An unpicklable return value gives value None and its repr."""
    outcome = world.run(target("unpicklable"), timeout=TIMEOUT)
    assert outcome.passed
    assert outcome.ranks[0].value is None
    assert "<function unpicklable.<locals>.<lambda>" in (outcome.ranks[0].value_repr or "")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nofile.py:f", "no such file 'nofile.py'"),
        ("x", "must be 'path/file.py:function' or 'package.module:function'"),
        (
            "chaoslight._schedule._model:missing",
            "chaoslight._schedule._model has no attribute 'missing'",
        ),
        ("no_such_pkg.mod:f", "cannot import 'no_such_pkg.mod'"),
        (f"{ROOT}/examples/ddp_train.py:trian", "did you mean 'train'"),
    ],
)
def test_bad_targets_fail_before_running(world: World, text: str, message: str) -> None:
    """Bad target strings give a one-line InvalidArgument, and the World goes on."""
    with pytest.raises(InvalidArgument, match=message) as caught:
        world.run(text, timeout=TIMEOUT)
    assert "\n" not in str(caught.value)


@pytest.mark.slow
def test_schedule_ranks_must_exist_and_timeout_be_positive(world: World) -> None:
    """A fault on a rank the World does not have, or a bad timeout, is refused."""
    schedule = chaoslight.Schedule([chaoslight.Raise(site="lightning.training_step", rank=2)])
    with pytest.raises(InvalidArgument, match="rank=2 is not a rank of World"):
        world.run(EXAMPLE, schedule)
    with pytest.raises(InvalidArgument, match="timeout=0 must be a positive number"):
        world.run(EXAMPLE, timeout=0)


@pytest.mark.slow
def test_a_dozen_mixed_examples_then_no_process_left() -> None:
    """12 examples mixing every outcome, each at least twice, are each classified right on
    one reused World; close leaves no child."""
    plan = [
        ("passed", EXAMPLE, None),
        ("failed", EXAMPLE, raise_on_rank_1()),
        ("hung", target("log_at_batch_end"), drop_all_reduce()),
        ("crashed", EXAMPLE, crash_rank_1()),
        ("passed", target("passing"), None),
        ("failed", target("raises_at_once"), None),
        ("hung", target("stubborn"), None),
        ("passed", target("leaves_a_mess"), None),
        ("failed", EXAMPLE, raise_on_rank_1(step=0)),
        ("crashed", EXAMPLE, crash_rank_1()),
        ("passed", target("state"), None),
        ("passed", EXAMPLE, None),
    ]
    before = set(children())
    with World(size=2) as pool:
        sessions = set(pool.processes)
        outcomes = []
        for status, text, schedule in plan:
            # Only the hangs wait for the timeout: a long one keeps a busy machine from
            # turning a slow passing example into a hang.
            timeout = TIMEOUT if status == "hung" else 30.0
            outcomes.append(pool.run(text, schedule, timeout=timeout))
            sessions |= set(pool.processes)
    assert [o.status for o in outcomes] == [status for status, _, _ in plan], "\n".join(
        o.report() for o in outcomes if o.status != "passed"
    )
    for outcome in outcomes:
        if outcome.status == "crashed":
            assert outcome.ranks[1].signal == signal.SIGKILL, outcome.report()
        if outcome.status == "hung":
            assert outcome.wall_s <= TIMEOUT + SLACK, outcome.report()
            assert set(outcome.evidence) == {0, 1}, outcome.report()
    assert set(children()) <= before
    assert sessions_alive(sessions) == []


@pytest.mark.slow
def test_close_after_an_exception_kills_every_worker() -> None:
    """Leaving the with block by an exception kills the workers at once."""
    with pytest.raises(ZeroDivisionError), World(size=2) as pool:
        sessions = set(pool.processes)
        assert len(sessions) == (4 if forkserver_supported() else 2)
        _ = 1 / 0
    assert sessions_alive(sessions) == []
    with pytest.raises(ChaosError, match="closed"):
        pool.run(EXAMPLE)


@pytest.mark.slow
def test_a_forked_child_leaves_the_parents_world_alone() -> None:
    """A child forked from the World's process (a DataLoader worker) ends without closing it."""
    with World(size=1, spares=0) as pool:
        sessions = set(pool.processes)
        child = os.fork()
        if child == 0:  # what the child's exit runs: the World's finalizer
            pool._finalizer()
            os._exit(0)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        running = [pid for pid in sessions if _state(pid) not in ("Z", "gone")]
        assert sorted(running) == sorted(sessions) and pool._root.is_dir()
    assert sessions_alive(sessions) == []


def test_a_reaped_worker_is_sent_no_signal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a worker is reaped its pid may be another process's: ending its slot sends nothing."""
    slot = Slot("true", dict(os.environ), tmp_path / "worker.log")  # exits at once
    assert slot.reap(wait=30) == 0
    sent: list[int] = []
    monkeypatch.setattr(os, "killpg", lambda pid, signum: sent.append(pid))
    monkeypatch.setattr(os, "kill", lambda pid, signum: sent.append(pid))
    slot.kill()
    slot.close()
    assert sent == [] and slot.dead


def test_a_missing_interpreter_is_one_line_naming_it() -> None:
    """World(python=...) that does not exist: WorkersDidNotStart naming it, no folder left."""
    before = set(Path(tempfile.gettempdir()).glob("chaoslight-world-*"))
    with pytest.raises(WorkersDidNotStart) as caught:
        World(size=1, python="/no/such/python")
    assert str(caught.value).startswith("python='/no/such/python' cannot be started")
    assert "\n" not in str(caught.value)
    assert set(Path(tempfile.gettempdir()).glob("chaoslight-world-*")) == before


def test_gloo_talks_over_loopback_unless_the_user_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ranks' gloo sockets use ``lo`` by default; a GLOO_SOCKET_IFNAME the user set stays."""
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    assert worker_environment([], (), "/tmp/x")["GLOO_SOCKET_IFNAME"] == "lo"
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth7")
    assert worker_environment([], (), "/tmp/x")["GLOO_SOCKET_IFNAME"] == "eth7"


SCRIPT = """
import sys
import chaoslight
from chaoslight._world import World
world = World(size=2).start(timeout=5)
print(world._root, *world.processes, flush=True)
slow = chaoslight.Delay(site="lightning.training_step", seconds=60)
world.run(sys.argv[1], chaoslight.Schedule([slow]), timeout=60)
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL])
def test_no_worker_survives_its_parent(how: signal.Signals, tmp_path: Path) -> None:
    """Ctrl-C of the parent at a random moment of its run (the ranks importing the target,
    the group forming, the example running), or its sudden death: it ends within seconds,
    and no worker, no file survives."""
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(SCRIPT))
    parent = subprocess.Popen(
        [sys.executable, str(script), EXAMPLE],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert parent.stdout is not None
        root, *pids = parent.stdout.readline().split()
        sessions = {int(pid) for pid in pids}
        # two ranks and a spare, or two ranks and the servers they were forked from
        assert len(sessions) == (4 if forkserver_supported() else 3)
        time.sleep(random.uniform(0.0, 3.0))  # by 1 s both ranks usually sit in the Delay
        parent.send_signal(how)
        parent.wait(timeout=10)
    finally:
        parent.kill()
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
    deadline = time.monotonic() + 10
    while (sessions_alive(sessions) or Path(root).exists()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sessions_alive(sessions) == []
    assert not Path(root).exists()
