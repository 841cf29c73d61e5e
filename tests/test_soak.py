"""`chaoslight soak`: seeded exponential intervals, faults where the run goes, the record and
its replay, usage errors, the watchdog, and a short soak of a correct program."""

from __future__ import annotations

import argparse
import functools
import itertools
import math
import signal
import time
from pathlib import Path
from typing import Any, cast

import pytest

import chaoslight
from chaoslight import Crash, Delay, Failure, Schedule, Settings, Verdict
from chaoslight._cli import build_parser, main
from chaoslight._schedule._validate import MAX_RESTARTS
from chaoslight._search import _soak as soak_module
from chaoslight._search._job import Job
from chaoslight._search._reach import Reach
from chaoslight._search._soak import JobDeadline, soak
from chaoslight._search._soak_plan import SoakPlan, arrival_times, job_schedule
from chaoslight._search._soak_record import (
    DURATION,
    Finding,
    JobRecord,
    SoakResult,
    load_soak,
)
from chaoslight._verdict._known import KNOWN_ISSUES, KnownClaim
from chaoslight.strategies import DEFAULT_KINDS

REPO = Path(__file__).resolve().parent.parent
CORRECT = f"{REPO / 'examples' / 'corpus' / 'resume_last.py'}:train"

# A run's reach as a baseline records it: hooks before the first step, then steps 0..3.
REACH = Reach(
    points=(
        ("lightning.on_fit_start", None),
        *(
            (site, step)
            for step in range(4)
            for site in (
                "lightning.training_step",
                "lightning.forward",
                "lightning.backward",
                "lightning.optimizer_step",
                "dist.gradient_allreduce",
            )
        ),
        ("torch.save", 3),
    ),
    user=frozenset({"lightning.training_step"}),
)


def fresh_plan(seed: int = 0, mtbf: float = 1.0, job_seconds: float = 2.0) -> SoakPlan:
    return SoakPlan(seed=seed, mtbf=mtbf, job_seconds=job_seconds, world_size=2, reach=REACH)


# A plan draws its fault pools once; the tests that only read a plan share them.
plan = functools.cache(fresh_plan)


def test_intervals_are_seeded_and_exponential() -> None:
    """The gaps between faults repeat with the seed and are exponential with mean MTBF."""
    times = list(itertools.islice(arrival_times(7, 3.0), 20000))
    assert times == list(itertools.islice(arrival_times(7, 3.0), 20000))
    assert times[:50] != list(itertools.islice(arrival_times(8, 3.0), 50))
    gaps = [b - a for a, b in zip([0.0, *times[:-1]], times, strict=True)]
    mean = sum(gaps) / len(gaps)
    assert mean == pytest.approx(3.0, rel=0.04)
    # Exponential: P(gap < mean) = 1 - 1/e, and the spread equals the mean.
    assert sum(g < 3.0 for g in gaps) / len(gaps) == pytest.approx(1 - math.exp(-1), abs=0.015)
    spread = math.sqrt(sum((g - mean) ** 2 for g in gaps) / len(gaps))
    assert spread == pytest.approx(mean, rel=0.06)


@pytest.mark.slow  # seconds of real runs: the fast loop stays under a minute
def test_the_same_seed_draws_the_same_soak() -> None:
    """Two plans from one seed draw the same jobs; another seed draws other jobs."""
    first = list(itertools.islice(fresh_plan(seed=4).jobs(), 15))
    assert first == list(itertools.islice(fresh_plan(seed=4).jobs(), 15))
    assert first != list(itertools.islice(plan(seed=5).jobs(), 15))


def test_faults_go_to_reached_points_of_default_kinds_with_restarts() -> None:
    """Every drawn fault is of a default kind, at a (site, step) the run reached, and a job
    is restarted once per fault that can end a run."""
    reached = set(REACH.points)
    jobs = list(itertools.islice(plan(seed=1, mtbf=0.5).jobs(), 40))
    faults = [fault for job in jobs for fault in job]
    assert len(faults) > 40  # about four a job at this MTBF
    assert {fault.kind for fault in faults} <= set(DEFAULT_KINDS)
    assert len({fault.kind for fault in faults}) >= 4
    assert all((fault.site, fault.step) in reached for fault in faults)
    for job in jobs:
        ending = sum(fault.fault_class() != "benign" for fault in job)
        assert job.restarts == min(ending, MAX_RESTARTS)


def test_the_number_of_faults_follows_the_mtbf() -> None:
    """Faults per job is about job length / MTBF (a job is as long as the baseline run)."""
    sparse = list(itertools.islice(plan(seed=2, mtbf=8.0).jobs(), 200))
    per_job = sum(len(job) for job in sparse) / len(sparse)
    assert per_job == pytest.approx(2.0 / 8.0, rel=0.3)
    assert sum(not job.faults for job in sparse) > 100  # most jobs run clean at this MTBF


def test_a_fault_goes_to_the_step_the_run_is_at() -> None:
    """A fault arriving early in a job lands before the first step, one arriving late at the
    last step."""
    import random

    chosen = plan()
    early = [chosen.fault_at(0.01, random.Random(n)) for n in range(20)]
    late = [chosen.fault_at(0.99, random.Random(n)) for n in range(20)]
    assert {fault.step for fault in late} == {3}
    # Before step 0 only on_fit_start is reached: a kind that cannot fire there goes to
    # the nearest step that has a site it can take.
    assert {fault.step for fault in early} <= {None, 0}
    assert None in {fault.step for fault in early}


def test_a_job_of_benign_faults_is_not_restarted() -> None:
    """Only a fault that can end a run asks for a restart."""
    delay = Delay(0.1, site="lightning.training_step", rank=0, step=1)
    crash = Crash(site="lightning.training_step", rank=1, step=2)
    assert job_schedule([delay]).restarts == 0
    assert job_schedule([delay, crash]).restarts == 1


@pytest.mark.parametrize(
    "argv, message",
    [
        (["soak", "t.py:train", "--mtbf", "0", "--duration", "5"], "--mtbf=0"),
        (["soak", "t.py:train", "--mtbf", "1", "--duration", "-1"], "--duration=-1"),
        (["soak", "t.py:train", "--mtbf", "nan", "--duration", "5"], "--mtbf=nan"),
        (["soak", "t.py:train", "--mtbf", "1", "--duration", "1e9"], "at most 604800"),
        (["soak", "t.py:train", "--duration", "5"], "needs --mtbf"),
        (["soak", "--mtbf", "1", "--duration", "5"], "needs a TARGET"),
        (["soak", "t.py:train", "--mtbf", "1", "--duration", "5", "--world-size", "0"], "0"),
        (["soak", "--replay", "MISSING"], "--replay soak file"),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad soak call exits 2 with one line naming the problem, before any World starts."""
    argv = [str(tmp_path / "missing.json") if a == "MISSING" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert message in err[0]


def test_the_record_is_a_failure_file_holding_every_job(tmp_path: Path) -> None:
    """The soak's file reads back as a failure (its first finding's shrunk schedule) and
    as the soak: every job with its verdict, in order."""
    crash = Crash(site="lightning.training_step", rank=1, step=2)
    jobs = [
        JobRecord(Schedule(), False, "passed"),
        JobRecord(
            Schedule([crash], restarts=1), True, "hung", "rank 0 hung", ("1: " + str(crash),)
        ),
    ]
    job = Job("t.py:train", 2, 20.0, ())
    found = Finding(1, "rank 0 hung", jobs[1].schedule, Schedule([crash]))
    result = SoakResult(job, 3, 2.0, 60.0, 1.5, jobs, [found], stopped=DURATION)
    path = tmp_path / "soak.json"
    result.save(path)
    failure = Failure.load(path)
    assert failure.schedule == Schedule([crash]) and failure.target == "t.py:train"
    assert failure.reason == "rank 0 hung"
    _, section, records = load_soak(path)
    assert [r.schedule for r in records] == [r.schedule for r in jobs]
    assert [r.failed for r in records] == [False, True]
    assert section["seed"] == 3 and section["mtbf"] == 2.0
    assert result.faults_by_kind() == {"crash": 1}


def test_a_plain_failure_file_is_not_a_soak(tmp_path: Path) -> None:
    """--replay of a failure file that holds no soak says so in one line (exit 2)."""
    path = tmp_path / "failure.json"
    Failure(Schedule(), "t.py:train").save(path)
    assert main(["soak", "--replay", str(path)]) == 2


def test_the_watchdog_interrupts_a_run_past_its_bound() -> None:
    """A run that goes past its bound is interrupted, and the watchdog says which."""
    deadline = JobDeadline()
    try:
        deadline.arm(0.2, "job 3")
        with pytest.raises(KeyboardInterrupt):
            time.sleep(10)
        assert deadline.expired == "job 3 ran past 0.2 s"
        deadline.arm(5, "job 4")
        deadline.disarm()
        time.sleep(0.1)
    finally:
        deadline.close()


def test_the_watchdog_works_in_a_process_that_ignores_ctrl_c() -> None:
    """Started with SIGINT ignored (a script's background job), the soak's watchdog still
    interrupts a run past its bound, while any other SIGINT stays ignored; SIG_IGN is back
    after."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        deadline = JobDeadline()
        try:
            signal.raise_signal(signal.SIGINT)  # someone else's: still ignored
            time.sleep(0.05)
            deadline.arm(0.2, "job 5")
            with pytest.raises(KeyboardInterrupt):
                time.sleep(10)
            assert deadline.expired == "job 5 ran past 0.2 s"
        finally:
            deadline.close()
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.slow
def test_a_short_soak_of_a_correct_program_is_clean_and_replays(
    world2: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A few seconds of soak on a correct resumable job: faults fired, no finding, a
    record that `chaoslight replay` and `chaoslight soak --replay` run again with the
    same verdicts."""
    settings = Settings(world_size=2)
    result = soak(CORRECT, settings, mtbf=1.0, duration=4.0, seed=0, world=world2)
    assert result.stopped == DURATION
    assert result.findings == [], [f.reason for f in result.findings]
    assert len(result.jobs) >= 2 and sum(result.faults_by_kind().values()) >= 1
    path = tmp_path / "soak.json"
    result.save(path)
    verdict, _ = chaoslight.replay(Failure.load(path), world=world2)
    assert not verdict.failed
    monkeypatch.chdir(REPO)  # a file's target runs only when it is code under this folder
    capsys.readouterr()
    assert main(["soak", "--replay", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"replayed {len(result.jobs)} jobs (seed 0): 0 fail now, 0 differ" in out, out


class _Outcome:
    wall_s = 0.5


class _BuggyJob:
    """A job whose program dies under any crash and survives everything else."""

    target, world_size, timeout, checks, reach = "t.py:train", 2, 20.0, (), REACH

    def __init__(self) -> None:
        self.runs: list[Schedule] = []

    def run(self, world: Any, schedule: Schedule) -> tuple[Verdict, _Outcome]:
        self.runs.append(schedule)
        time.sleep(0.002)
        crashed = [f for f in schedule if isinstance(f, Crash)]
        fired = tuple((f.rank or 0, str(f)) for f in schedule)
        reason = "rank 1 crashed and the restart failed" if crashed else ""
        status = "crashed" if crashed else "passed"
        return Verdict(bool(crashed), reason, status, fired=fired), _Outcome()


class _NoWorld:
    def __init__(self, size: int) -> None:
        self.size = size
        self.renewed = 0

    def renew(self) -> _NoWorld:
        self.renewed += 1
        return self

    def __enter__(self) -> _NoWorld:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.mark.slow
def test_failing_jobs_are_one_finding_shrunk_and_counted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Every job that fails the same way counts towards one finding, shrunk to one crash
    with no restart, and the record's headline is that minimal schedule."""
    fake = _BuggyJob()
    monkeypatch.setattr(soak_module, "make_job", lambda target, settings: fake)
    no_world = cast(Any, _NoWorld(2))
    result = soak("t.py:train", Settings(), mtbf=0.3, duration=4.0, seed=2, world=no_world)
    failing = [record for record in result.jobs if record.failed]
    assert len(result.jobs) > 10 and len(failing) >= 2
    assert all(any(isinstance(f, Crash) for f in r.schedule) for r in failing)
    assert len(result.findings) == 1
    (finding,) = result.findings
    assert finding.count == len(failing) and finding.status == "failed"
    assert no_world.renewed == 1  # the finding's replay ran on new processes
    assert finding.minimal is not None and finding.minimal.restarts == 0
    assert [type(f) for f in finding.minimal] == [Crash]
    assert result.failed
    path = tmp_path / "soak.json"
    result.save(path)
    assert Failure.load(path).schedule == finding.minimal


def test_a_target_that_fails_without_faults_stops_the_soak(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A baseline that fails is the finding: no fault is drawn, no job runs."""
    fake = _BuggyJob()
    hung = (Verdict(True, "rank 0 hung", "hung"), _Outcome())
    fake.run = lambda world, schedule: hung  # type: ignore[method-assign]
    monkeypatch.setattr(soak_module, "make_job", lambda target, settings: fake)
    no_world = cast(Any, _NoWorld(2))
    result = soak("t.py:train", Settings(), mtbf=1.0, duration=5.0, seed=0, world=no_world)
    assert result.jobs == [] and result.failed
    assert [f.status for f in result.findings] == ["fails-without-faults"]


def test_every_soak_option_says_its_default_or_that_it_is_required() -> None:
    """`chaoslight soak --help` explains each option and its default (or that it is needed)."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    soak_parser = commands.choices["soak"]
    formatter = soak_parser._get_formatter()
    for action in soak_parser._actions:
        if not action.option_strings or action.default in (argparse.SUPPRESS, False, []):
            continue
        shown = formatter._expand_help(action)
        if action.default is None:
            assert "default" in shown or "required" in shown, shown
        else:
            value = f"{action.default:g}" if isinstance(action.default, float) else action.default
            assert f"default: {value}" in shown, shown


class _KnownWhenAlone(_BuggyJob):
    """A crash fails the job; a crash with no other fault is a known framework issue."""

    def run(self, world: Any, schedule: Schedule) -> tuple[Verdict, _Outcome]:
        verdict, outcome = super().run(world, schedule)
        if verdict.failed and len(schedule) == 1:
            claim = KnownClaim(KNOWN_ISSUES[0], "lightning", "2.6.6")
            verdict.known, verdict.claims = claim, (claim,)
        return verdict, outcome


@pytest.mark.slow
def test_a_finding_is_not_shrunk_into_a_known_framework_issue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Shrinking keeps only schedules that still fail as the program's own failure: a
    smaller one that only meets a known framework issue is not the finding made smaller,
    and the finding's replay must fail that way too."""
    fake = _KnownWhenAlone()
    monkeypatch.setattr(soak_module, "make_job", lambda target, settings: fake)
    no_world = cast(Any, _NoWorld(2))
    result = soak("t.py:train", Settings(), mtbf=0.3, duration=4.0, seed=2, world=no_world)
    assert result.findings, [r.schedule.to_text() for r in result.jobs]
    for finding in result.findings:
        assert finding.minimal is not None and len(finding.minimal) >= 2, finding.minimal
        assert finding.status == "failed"


def soak_file(tmp_path: Path, findings: list[Finding]) -> Path:
    """A soak's record on the t.py:train of ``tmp_path``, holding ``findings``."""
    crash = Crash(site="lightning.training_step", rank=1, step=2)
    jobs = [JobRecord(Schedule([crash], restarts=1), True, "failed", "rank 1 crashed")]
    job = Job("t.py:train", 2, 20.0, ())
    (tmp_path / "t.py").write_text("def train():\n    pass\n")
    path = tmp_path / "soak.json"
    SoakResult(job, 3, 2.0, 60.0, 1.5, jobs, findings).save(path)
    return path


def replayed_run(failure: Failure, failed: bool) -> tuple[Verdict, Any]:
    """A replay's verdict and outcome: every rank passed, or rank 1 failed."""
    from chaoslight import Outcome
    from chaoslight._report._records import ExceptionInfo, RankResult

    error = (
        ExceptionInfo("RuntimeError", "injected", "RuntimeError: injected\n") if failed else None
    )
    ranks = (RankResult(0, "passed"), RankResult(1, "failed" if failed else "passed", error))
    status = "failed" if failed else "passed"
    outcome = Outcome(status, ranks, [], 0.2, failure.schedule, failure.target)
    return Verdict(failed, "rank 1 raised" if failed else "", status), outcome


def test_chaoslight_replay_of_a_soak_file_replays_every_finding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`chaoslight replay SOAK` says the file is a soak's record, names the command that
    runs every job, and replays each finding's shrunk schedule (its job's when not shrunk)
    in order; exit 1 as one still fails."""
    from chaoslight._cli import _replay

    crash = Crash(site="lightning.training_step", rank=1, step=2)
    delay = Delay(site="dist.gradient_allreduce", rank=0, step=1, seconds=0.5)
    first = Finding(0, "rank 1 crashed", Schedule([crash, delay]), Schedule([crash]))
    second = Finding(4, "rank 0 hung", Schedule([delay]), status="flaky")
    path = soak_file(tmp_path, [first, second])
    replayed: list[Schedule] = []

    def fake_replay(failure: Failure, **options: Any) -> tuple[Any, Any]:
        replayed.append(failure.schedule)
        return replayed_run(failure, failed=len(replayed) == 1)  # the flaky one passes

    monkeypatch.setattr(_replay, "replay", fake_replay)
    monkeypatch.chdir(tmp_path)
    assert main(["replay", str(path)]) == 1
    out = capsys.readouterr().out
    assert replayed == [Schedule([crash]), Schedule([delay])]
    assert (
        f"is a soak's record: its 2 findings, each once; every job: chaoslight soak --replay {path}"
        in out
    )
    assert (
        "finding 1 of 2 (the soak: failed):" in out and "finding 2 of 2 (the soak: flaky):" in out
    )
    assert out.count("replay: still fails") == 1 and out.count("replay: passes") == 1


def test_chaoslight_replay_of_a_clean_soak_runs_its_hardest_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A soak with no finding replays its headline (the job that fired the most faults)
    once, and says so, with the command that runs every job."""
    from chaoslight._cli import _replay

    path = soak_file(tmp_path, [])
    replayed: list[Schedule] = []

    def fake_replay(failure: Failure, **options: Any) -> tuple[Any, Any]:
        replayed.append(failure.schedule)
        return replayed_run(failure, failed=False)

    monkeypatch.setattr(_replay, "replay", fake_replay)
    monkeypatch.chdir(tmp_path)
    assert main(["replay", str(path)]) == 0
    out = capsys.readouterr().out
    assert len(replayed) == 1 and len(replayed[0]) == 1
    assert "is a soak's record with no finding" in out and "chaoslight soak --replay" in out
