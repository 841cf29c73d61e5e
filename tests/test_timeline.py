"""The per-rank timeline: spans recorded by ``inject(trace=True)``, the model built from a
merged event log (spans, marks, the wavefront of a hang), its text table and HTML page."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import chaoslight
from chaoslight import Event, Outcome
from chaoslight._report import settle
from chaoslight._report._timeline import Header, RankEnd, build, render_text
from chaoslight._runtime import FIRED
from chaoslight._runtime._trace import ENTER, EXIT
from chaoslight._schedule._clip import clip
from chaoslight._world import ExceptionInfo, RankResult

EXAMPLE = f"{Path(__file__).resolve().parents[1]}/examples/ddp_train.py:train"

# -- recording ------------------------------------------------------------------------------


def test_trace_records_collectives_with_sequence_numbers_and_raises(gloo_group: Any) -> None:
    """Each collective's enter carries the rank's sequence number; a call that raised says
    so at its exit, and one made inside an ``except`` block that returns does not."""
    import torch
    import torch.distributed as dist

    schedule = "raise@dist.barrier nth=2 times=1"
    with chaoslight.inject(schedule, trace=True) as run:
        dist.all_reduce(torch.ones(1))
        dist.barrier()
        try:
            dist.barrier()
        except RuntimeError:
            dist.all_reduce(torch.ones(1))  # inside the except block, and it returns
    spans = [(e.kind, e.site, e.detail) for e in run.events if e.kind in (ENTER, EXIT)]
    assert spans == [
        (ENTER, "dist.all_reduce", "#1"),
        (EXIT, "dist.all_reduce", ""),
        (ENTER, "dist.barrier", "#2"),
        (EXIT, "dist.barrier", ""),
        (ENTER, "dist.barrier", "#3"),
        (EXIT, "dist.barrier", "raised RuntimeError"),
        (ENTER, "dist.all_reduce", "#4"),
        (EXIT, "dist.all_reduce", ""),
    ]
    assert "enter" not in run.report() and "fired" in run.report()


def test_without_trace_no_span_is_recorded(gloo_group: Any) -> None:
    """Tracing is off by default: only the faults' events are logged."""
    import torch
    import torch.distributed as dist

    with chaoslight.inject("delay@dist.all_reduce seconds=0.001") as run:
        dist.all_reduce(torch.ones(1))
    assert [e.kind for e in run.events] == [FIRED]


# -- the model ------------------------------------------------------------------------------
def event(kind: str, site: str, rank: int, time: float, **fields: Any) -> Event:
    """An event at ``time`` seconds (monotonic), pid 1 unless given."""
    fields.setdefault("pid", 1)
    return Event(kind, site, rank, fields.pop("step", 0), 100.0 + time, 0.0, **fields)


def spans_of(rank: int, calls: list[tuple[str, float, float, str]]) -> list[Event]:
    """Enter/exit pairs (site, start, end, seq) on ``rank``; end < 0: never left."""
    out = []
    for number, (site, start, end, seq) in enumerate(calls, 1):
        out.append(event(ENTER, site, rank, start, call=number, detail=seq))
        if end >= 0:
            out.append(event(EXIT, site, rank, end, call=number))
    return out


HEADER = Header("t.py:train", "hung", "", "rank 0 hung", "delay@dist.barrier seconds=5")
ENDS = [RankEnd(0, "hung", "hung", "rank 0 waits"), RankEnd(1, "hung", "hung", "rank 1 waits")]


def test_ranks_part_ways_where_their_collectives_differ() -> None:
    """Hung ranks whose #2 are a barrier and a broadcast: the wavefront is #2, and the
    spans never left run to the end of the timeline."""
    events = spans_of(0, [("dist.all_reduce", 0.0, 0.1, "#1"), ("dist.barrier", 0.2, -1, "#2")])
    events += spans_of(1, [("dist.all_reduce", 0.0, 0.1, "#1"), ("dist.broadcast", 0.3, -1, "#2")])
    events.append(event(EXIT, "x", 1, 2.0, detail="ignored: no matching enter"))
    timeline = build(HEADER, events, ENDS)
    assert timeline.wavefront is not None and timeline.wavefront.seq == 2
    assert timeline.wavefront.line() == (
        "the ranks part ways at collective #2: rank 0 in dist.barrier, rank 1 in dist.broadcast"
    )
    blocked = timeline.lanes[0].spans[-1]
    assert (blocked.label, blocked.open, blocked.end) == ("#2 barrier", True, pytest.approx(2.0))
    text = render_text(timeline)
    assert re.search(r"#2 barrier \(1.80 s, never left\) +#2 broadcast \(1.70 s", text), text


def test_a_rank_that_never_reached_a_collective_is_the_wavefront() -> None:
    """One rank returned after #1 while the other waits in #2: #2 is where they part."""
    events = spans_of(0, [("dist.all_reduce", 0.0, 0.1, "#1"), ("dist.barrier", 0.2, -1, "#2")])
    events += spans_of(1, [("dist.all_reduce", 0.0, 0.1, "#1")])
    timeline = build(HEADER, events, ENDS)
    assert timeline.wavefront is not None
    assert timeline.wavefront.line().endswith("rank 0 in dist.barrier, rank 1 never reached it")


def test_spans_nest_and_a_restarted_process_leaves_its_spans_open() -> None:
    """Nested calls get depths; a new pid on the rank means the old process died in its
    open calls, which stay open."""
    events = [
        event(ENTER, "lightning.training_step", 0, 0.0, call=1, step=3),
        event(ENTER, "lightning.forward", 0, 0.1, call=1, step=3),
        event(EXIT, "lightning.forward", 0, 0.2, call=1, step=3),
        event(FIRED, "lightning.training_step", 0, 0.25, fault="crash@lightning.training_step"),
        event(ENTER, "lightning.setup", 0, 1.0, call=1, pid=2, step=None),
        event(EXIT, "lightning.setup", 0, 1.1, call=1, pid=2, step=None),
    ]
    crashed = RankEnd(0, "crashed", "crashed: SIGKILL", "rank 0 crashed")
    header = Header("t.py:train", "crashed", "", "", "crash@lightning.training_step")
    lane = build(header, events, [crashed]).lanes[0]
    shapes = {(s.site, s.depth, s.open) for s in lane.spans}
    assert shapes == {
        ("lightning.training_step", 0, True),
        ("lightning.forward", 1, False),
        ("lightning.setup", 0, False),
    }
    assert [m.text for m in lane.marks] == ["step 3", "crash@lightning.training_step"]


def test_text_form_keeps_start_and_end_and_aligns_matching_collectives() -> None:
    """A long run's table keeps its first and last rows, says how many it left out, and
    puts the ranks' same collective on one row even when they reach it at different times."""
    events: list[Event] = []
    for rank, late in ((0, 0.0), (1, 0.02)):
        calls = [
            ("dist.all_reduce", n * 0.1 + late, n * 0.1 + late + 0.01, f"#{n}")
            for n in range(1, 60)
        ]
        events += spans_of(rank, calls)
    header = Header("t.py:train", "passed", "", "", "")
    ends = [RankEnd(r, "passed", "returned", f"rank {r} returned None") for r in (0, 1)]
    text = render_text(build(header, events, ends), head=3, tail=5)
    lines = text.splitlines()
    assert re.search(r"#1 all_reduce +#1 all_reduce", lines[3]), text  # after "step 0"
    assert "#59 all_reduce" in text and "END returned" in lines[-1]
    assert re.search(r"… \d+ rows …", text) and len(lines) == 2 + 3 + 1 + 5


# -- outcome, text and HTML -----------------------------------------------------------------
def synthetic_outcome(steps: int) -> Outcome:
    """Two ranks of ``steps`` steps, 4 spans each (training_step > forward, an all_reduce,
    a hook); rank 1 raises by a fault after the last, rank 0 is released."""
    events: list[Event] = []
    for rank in (0, 1):
        calls: list[tuple[str, float, float, str]] = []
        for step in range(steps):
            t = step * 2e-4 + rank * 1e-5
            calls += [
                ("lightning.training_step", t, t + 6e-5, ""),
                ("dist.all_reduce", t + 7e-5, t + 9e-5, f"#{step + 1}"),
                ("lightning.on_train_batch_end", t + 1e-4, t + 1.1e-4, ""),
            ]
        events += spans_of(rank, calls)
        events += [
            event(ENTER, "lightning.forward", rank, s * 2e-4 + 1e-5, call=10**6 + s)
            for s in range(steps)
        ]
        events += [
            event(EXIT, "lightning.forward", rank, s * 2e-4 + 5e-5, call=10**6 + s)
            for s in range(steps)
        ]
    fault = "raise@lightning.training_step rank=1 step=2"
    events.append(event(FIRED, "lightning.training_step", 1, steps * 2e-4, fault=fault))
    ranks = (
        RankResult(0, "released", ExceptionInfo("RuntimeError", "gloo", "Traceback: gloo", True)),
        RankResult(1, "failed", ExceptionInfo("RuntimeError", "injected", "Traceback: injected")),
    )
    merged = sorted(events, key=lambda e: e.time)
    return Outcome("failed", ranks, merged, 1.5, chaoslight.Schedule.parse(fault), "t.py:train")


def test_html_page_is_self_contained_with_a_lane_per_rank(tmp_path: Path) -> None:
    """The page holds the verdict, the cause, the schedule, the replay command, one lane
    per rank, the fault and a collective label, each rank's traceback, and fetches nothing."""
    outcome = synthetic_outcome(steps=5)
    path = outcome.to_html(
        tmp_path / "out" / "t.html", "the oracle's verdict", "chaoslight replay f"
    )
    page = path.read_text()
    assert page.count("class='lane'") == 2
    for text in (
        "the oracle&#x27;s verdict",
        "rank 1 raised: RuntimeError: injected",
        "raise@lightning.training_step rank=1 step=2",
        "chaoslight replay f",
        "#3 all_reduce",
        "Traceback: gloo",
    ):
        assert text in page, text
    assert not re.search(r"<script|<link|<img|url\(|https?://(?!www\.w3\.org/2000/svg)", page)


def test_ten_thousand_spans_make_a_small_page_and_a_short_table(tmp_path: Path) -> None:
    """A run of 10 000 spans per rank is bundled into a page of at most 150 KB (measured:
    about 75 KB) and a table of at most 40 lines."""
    outcome = synthetic_outcome(steps=2500)
    assert len(outcome.events) > 40_000
    size = outcome.to_html(tmp_path / "big.html").stat().st_size
    assert size < 150_000, size
    table = outcome.timeline_text()
    assert len(table.splitlines()) <= 40 and "END raised RuntimeError" in table


def test_outcome_without_trace_still_shows_faults_and_ends() -> None:
    """An untraced outcome's timeline says so and still shows the fault and each end."""
    outcome = synthetic_outcome(steps=1)
    untraced = Outcome(
        outcome.status,
        outcome.ranks,
        [e for e in outcome.events if e.kind == FIRED],
        schedule=outcome.schedule,
    )
    text = untraced.timeline_text()
    assert "not traced" in text and "FIRED raise@lightning.training_step" in text
    assert "END released (RuntimeError)" in text and "END raised RuntimeError" in text


def test_outcome_repr_is_one_short_line() -> None:
    """An outcome in a failed assert prints as one line, not every rank's traceback."""
    text = repr(synthetic_outcome(steps=3))
    assert text.startswith("<Outcome failed") and "\n" not in text and len(text) < 400


def test_report_counts_spans_instead_of_listing_them() -> None:
    """``outcome.report()`` lists the fault, not the thousands of spans."""
    report = synthetic_outcome(steps=50).report()
    assert "fired" in report and "enter" not in report
    assert "check observations and spans not shown" in report


@pytest.mark.slow
def test_a_crashed_rank_leaves_its_collective_open(world2: Any, tmp_path: Path) -> None:
    """A real World run, traced: rank 0 killed inside an all_reduce shows that collective
    open (never left) with its sequence number, and its lane ends in SIGKILL."""
    schedule = "crash@dist.all_reduce rank=0 step=1"
    outcome = world2.run(EXAMPLE, schedule, timeout=20, trace=True)
    assert outcome.status == "crashed", outcome.report()
    timeline = outcome.timeline()
    lane = timeline.lanes[0]
    last = [s for s in lane.spans if s.seq][-1]
    assert (last.site, last.open) == ("dist.all_reduce", True)
    assert lane.end.short == "crashed: SIGKILL"
    text = outcome.timeline_text()
    assert f"#{last.seq} all_reduce (never left)" in text
    assert "FIRED crash@dist.all_reduce rank=0 step=1" in text
    page = outcome.to_html(tmp_path / "crash.html").read_text()
    assert "never left" in page and "rect class='span c-coll open'" in page


def test_a_long_multi_line_error_reads_as_one_clipped_line() -> None:
    """A rank's 1000-character, multi-line message is one 200-character line ending in …."""
    message = "first line\n" + "word " * 200
    error = ExceptionInfo("ValueError", message)
    ranks = settle([RankResult(0, "passed"), RankResult(1, "failed", error)])
    line = Outcome("failed", ranks).evidence[1]
    assert line.startswith("rank 1 raised: ValueError: first line word word") and "\n" not in line
    assert len(line) == len("rank 1 raised: ") + 200 and line.endswith("…")


def test_clip_cuts_with_an_ellipsis_and_may_fold_whitespace() -> None:
    """Text within the limit is kept as is; longer text ends in …; one_line folds spaces."""
    assert clip("abcdef", 6) == "abcdef"
    assert clip("abcdefg", 6) == "abcde…"
    assert clip("a\n  b\tc ", 5) == "a\n  …"
    assert clip("a\n  b\tc ", 5, one_line=True) == "a b c"
