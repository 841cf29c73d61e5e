"""The culprit a failing run's report names first (``Outcome.culprit``, the summary, the
verdict), on synthetic outcomes, and ``benchmarks/localization.py``'s scoring; one slow
end-to-end run of the benchmark's ``--quick`` on one kind."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest

from chaoslight import Event, Outcome, Schedule, judge
from chaoslight._report._culprit import Cause, Culprit
from chaoslight._report._records import ExceptionInfo, RankResult
from chaoslight._runtime import FIRED
from chaoslight._schedule import fault_from_text

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "localization.py"
GLOO = "Connection closed by peer"


def _benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("localization_benchmark", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


bench = _benchmark()


def fired(rank: int, fault: str, step: int | None, at: float = 1.0) -> Event:
    return Event(FIRED, fault.split("@")[1].split()[0], rank, step, at, at, fault, 1)


def raised(rank: int, text: str, ended: float, distributed: bool = False) -> RankResult:
    name, message = text.split(": ", 1)
    exc = ExceptionInfo(name, message, f"Traceback:\n{text}\n", distributed)
    return RankResult(rank, "failed", exc, ended_s=ended)


def outcome(status: str, ranks: list[RankResult], events: list[Event], **kw: object) -> Outcome:
    schedule = Schedule([fault_from_text(e.fault) for e in events if e.fault])
    return Outcome(status, tuple(ranks), events, 3.0, schedule, "t.py:train", 30.0, **kw)


def test_a_crash_is_named_before_the_peer_gloo_released_first() -> None:
    """A peer's gloo error that reached the parent first is its consequence: the crashed
    rank, its site and step come first, in the data and in the summary."""
    crash = "crash@lightning.training_step rank=1 step=2"
    ranks = [
        raised(0, f"RuntimeError: {GLOO}", 0.5, distributed=True),
        RankResult(1, "crashed", signal=9, ended_s=0.6, evidence=f"rank 1 crashed after {crash}"),
    ]
    seen = outcome("crashed", ranks, [fired(1, crash, 2)])
    assert seen.culprit == Culprit(1, Cause.FAULT, "lightning.training_step", 2, crash)
    first = seen.summary().split(": ", 1)[1].split("; ")[0]
    assert first.startswith("rank 1") and "lightning.training_step" in first


def test_a_raised_error_is_named_with_the_site_and_step_it_fired_at() -> None:
    """An injected error's traceback names neither its site nor its step: the report adds
    them, so the first line says where the fault struck."""
    error = "raise@lightning.backward rank=0"  # any step: the one it fired at is named
    ranks = [raised(0, "RuntimeError: injected by chaoslight", 1.0), RankResult(1, "passed")]
    seen = outcome("failed", ranks, [fired(0, error, 4)])
    assert seen.culprit == Culprit(0, Cause.FAULT, "lightning.backward", 4, error)
    assert "lightning.backward" in seen.summary() and "at step 4" in seen.summary()


def test_a_dropped_sync_names_the_rank_that_skipped_it_not_the_one_that_waits() -> None:
    """Rank 1 skipped a barrier and returned; rank 0 waits in it. The verdict names rank 1
    (where the desync was injected) first, with the site and step."""
    drop = "drop_sync@dist.barrier rank=1 step=3"
    ranks = [
        RankResult(0, "hung", evidence="rank 0 hung: blocked in collective #5, dist.barrier"),
        RankResult(1, "passed", value_repr="None", ended_s=1.0),
    ]
    seen = outcome("hung", ranks, [fired(1, drop, 3)])
    verdict = judge(seen)
    assert verdict.failed and seen.culprit is not None and seen.culprit.rank == 1
    assert verdict.reason.startswith("rank 1") and "dist.barrier" in verdict.reason.split("; ")[0]


def test_a_hung_culprit_is_named_with_its_fault_before_its_long_evidence() -> None:
    """A hung rank's evidence goes on about its peers; the fault that struck it, its site
    and step come in the first clause."""
    drop = "drop_sync@dist.all_reduce rank=0 step=5"
    why = "rank 0 hung: blocked 1.2 s in collective #9, dist.broadcast; rank 1 is in #9"
    ranks = [
        RankResult(0, "hung", evidence=why),
        RankResult(1, "hung", evidence="rank 1 hung: blocked in #9, dist.all_reduce"),
    ]
    verdict = judge(outcome("hung", ranks, [fired(0, drop, 5)]))
    first = verdict.reason.split("; ")[0]
    assert first == f"rank 0: the injected {drop} fired at step 5", verdict.reason


def test_the_terminal_shows_the_culprit_traceback_not_the_first_to_arrive() -> None:
    """A peer's error that reached the parent first is not the root cause's traceback:
    the rank the injected error fired on is shown."""
    from rich.console import Console

    from chaoslight._report import show_cause_traceback

    error = "raise@lightning.training_step rank=1 step=0"
    ranks = [
        raised(0, "ValueError: loss went missing", 0.2),
        raised(1, "RuntimeError: injected by chaoslight", 0.4),
    ]
    console = Console(record=True, width=200)
    show_cause_traceback(console, outcome("failed", ranks, [fired(1, error, 0)]))
    shown = console.export_text()
    assert shown.startswith("rank 1 traceback") and "ValueError" not in shown


def test_of_two_faults_the_one_whose_rank_ended_by_itself_is_the_culprit() -> None:
    """An OOM rank 0 recovered from fired first; rank 1's crash ended the job: rank 1."""
    oom = "oom@lightning.forward rank=0 step=1"
    crash = "crash@lightning.backward rank=1 step=4"
    ranks = [
        replace(raised(0, f"RuntimeError: {GLOO}", 0.5, True), status="released"),
        RankResult(1, "crashed", signal=9, ended_s=0.6),
    ]
    seen = outcome("crashed", ranks, [fired(0, oom, 1, at=1.0), fired(1, crash, 4, at=2.0)])
    assert seen.culprit == Culprit(1, Cause.FAULT, "lightning.backward", 4, crash)


def test_a_straggler_is_not_the_culprit_of_a_peer_own_error() -> None:
    """A delay cannot fail a job: the rank that raised by itself is the culprit."""
    ranks = [RankResult(0, "passed"), raised(1, "FileNotFoundError: stats.pt", 1.0)]
    seen = outcome("failed", ranks, [fired(0, "delay@lightning.training_step rank=0", 1)])
    assert seen.culprit == Culprit(1, Cause.ERROR)
    assert seen.summary().split(": ", 1)[1].startswith("rank 1 raised")


def test_a_run_that_passed_names_no_culprit() -> None:
    """Every rank passed: nothing to name."""
    crash = "oom@lightning.forward rank=0 step=1"
    seen = outcome(
        "passed", [RankResult(0, "passed"), RankResult(1, "passed")], [fired(0, crash, 1)]
    )
    assert seen.culprit is None


def test_released_ranks_alone_are_named_as_a_consequence() -> None:
    """With no fault and every failing rank released by a peer, the culprit is marked a
    consequence, not a cause."""
    ranks = [raised(0, f"RuntimeError: {GLOO}", 1.0, True), RankResult(1, "passed")]
    seen = outcome("failed", [replace_status(ranks[0], "released"), ranks[1]], [])
    assert seen.culprit == Culprit(0, Cause.CONSEQUENCE)


def replace_status(result: RankResult, status: str) -> RankResult:
    return replace(result, status=status)


# -- the benchmark's scoring ------------------------------------------------------------------
TRUTH = bench.Truth(1, "lightning.training_step", 2, 10.0)


def test_score_counts_each_part_of_the_culprit_apart() -> None:
    """A culprit with the right rank but another step scores rank and cause, not step."""
    named = Culprit(1, Cause.FAULT, "lightning.training_step", 3, "crash@...")
    found = bench.score(TRUTH, named, "rank 1 died: crash@lightning.training_step step=3", 0.4)
    assert (found.rank, found.site, found.step, found.cause) == (True, True, False, True)
    assert not found.text  # the text names step 3, not 2


def test_score_of_a_consequence_or_nothing_is_wrong() -> None:
    """A peer named as a consequence, or no culprit at all, scores no cause."""
    peer = bench.score(TRUTH, Culprit(0, Cause.CONSEQUENCE), "consequence: rank 0 ...", 1.0)
    assert not peer.rank and not peer.cause
    assert bench.score(TRUTH, None, "", 1.0) == bench.Score(False, False, False, False, False, 1.0)


def test_names_first_reads_the_first_clause_only() -> None:
    """The text is right when its first clause names the rank first, the site and the step."""
    right = (
        "rank 1 raised: RuntimeError (the injected raise@lightning.training_step fired at step 2)"
    )
    assert bench.names_first(right + "; consequence: rank 0 was released", TRUTH)
    assert not bench.names_first("rank 0 hung; " + right, TRUTH)
    assert not bench.names_first(
        "rank 1 raised: RuntimeError; at lightning.training_step step 2", TRUTH
    )


def test_the_table_reports_rates_and_times_and_the_kinds_short_of_target() -> None:
    """A kind with one wrong rank in four is 75 % and short of the target."""
    good = bench.Score(True, True, True, True, True, 0.5)
    tally = bench.Tally(drawn=5, recovered=1, scores=[good, good, good, replace(good, rank=False)])
    text = bench.table({"crash": tally})
    assert "| crash | 4 | 75 | 100 | 100 | 100 | 100 | 0.50 | 0.50 | 1 | 0 | 0 |" in text
    assert bench.misses({"crash": tally, "oom": bench.Tally(scores=[good])}) == ["crash"]


def test_a_slow_verdict_is_short_of_target() -> None:
    """Every culprit right, but the p90 time to the verdict over 2 s: short."""
    slow = [bench.Score(True, True, True, True, True, s) for s in (0.5, 0.6, 0.7, 3.0, 3.5)]
    assert bench.percentile([s.seconds for s in slow], 0.9) == 3.5
    assert bench.misses({"raise": bench.Tally(scores=slow)}) == ["raise"]


def test_the_scored_kinds_are_those_whose_traits_can_fail_a_job() -> None:
    """Crashes, errors, OOMs, preemptions and dropped syncs are scored; delays and
    reorders on every rank, which cannot fail a correct job, are not."""
    kinds = {cls.kind for cls in bench.failing_kinds()}
    assert {"crash", "raise", "oom", "preempt", "drop_sync"} <= kinds
    assert not kinds & {"delay", "reorder"}


@pytest.mark.slow
def test_the_quick_benchmark_scores_crashes_at_full_marks() -> None:
    """``--quick --only crash`` runs, prints the table, and names every crash's rank and
    cause right."""
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--only", "crash"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    row = next(line for line in run.stdout.splitlines() if line.startswith("| crash |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert int(cells[1]) > 0 and cells[2] == "100" and cells[5] == "100", run.stdout


def test_a_seen_flip_is_scored_by_its_note_and_an_undetected_one_is_not() -> None:
    """A flip in a run that passed: the verdict's note names its rank, site and step and
    what saw it; one that went undetected is counted apart, not scored."""
    flip = fault_from_text("flip@lightning.on_before_optimizer_step rank=1 step=2")
    truth = bench.Truth(1, "lightning.on_before_optimizer_step", 2, 1.0)

    class Seen:
        notes = (f"{flip} on rank 1 (grad 0[3]: 0.1 -> 3e37) was seen: replicas differ",)

    class Unseen:
        notes = (f"{flip} on rank 1 went undetected: every rank finished",)

    found = bench.score_silent(truth, flip, Seen(), 0.3)
    assert found == bench.Score(True, True, True, True, True, 0.3)
    assert bench.score_silent(truth, flip, Unseen(), 0.3) is None


def test_every_default_kind_is_scored_or_listed_with_its_reason() -> None:
    """The kinds the default search draws are scored, or listed as unable to fail a job."""
    from chaoslight._schedule import FAULT_KINDS

    scored = {cls.kind for cls in bench.failing_kinds()}
    listed = {line.split(":")[0] for line in bench.not_scored()}
    drawn = {name for name, cls in FAULT_KINDS.items() if cls.drawn_by_default}
    assert drawn <= scored | listed and not scored & listed
    assert "delay" in listed and {"flip", "repeat_batch", "bad_checkpoint"} <= scored
