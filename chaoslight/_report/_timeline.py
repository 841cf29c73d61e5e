"""The per-rank timeline of one example: lanes of spans and marks, and its text form.

``build`` turns the merged event log into one ``Lane`` per rank over wall time (seconds
from the first event): the spans a traced run recorded (``_runtime/_trace.py``: hooks,
steps, collectives labelled ``#7 barrier``), the faults that fired, step and epoch marks,
and how the rank ended. A span entered and never left (the rank died or hung in it) is
``open`` and runs to the end of its lane. For a hang, ``wavefront`` is the first
collective sequence number at which the ranks part ways: different collectives under one
number, or a rank that never reached it (what flight-recorder analysis looks for).

``render_text`` is the compact form for terminals and CI logs (one column per rank);
``_timeline_html`` draws the same model as a self-contained HTML page. The model knows
nothing of ``Outcome``: ``_outcome`` builds the ``Header`` and the ``RankEnd`` s.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from chaoslight._report._status import HUNG
from chaoslight._runtime._events import FIRED, NEVER_FIRED, SURFACED, Event
from chaoslight._runtime._trace import ENTER, EXIT
from chaoslight._schedule._clip import clip

FAULT, STEP, EPOCH = "fault", "step", "epoch"
EPOCH_SITE = "lightning.on_train_epoch_start"
HEAD_ROWS = 4  # the text form keeps its first rows (the start) ...
TAIL_ROWS = 22  # ... and its last (where it went wrong), eliding the middle
MERGE_S = 0.005  # items of different ranks this close in time share a text row
TEXT_WIDTH = 114


@dataclass(frozen=True)
class Header:
    """What the page says above the lanes."""

    target: str
    status: str
    verdict: str  # the judgement: the oracle's reason, or the outcome's summary
    cause: str  # the root cause first, then its consequences
    schedule: str  # the text form
    replay: str = ""  # the command that runs it again
    wall_s: float = 0.0


@dataclass(frozen=True)
class RankEnd:
    """How a rank ended: ``short`` at the end of its lane, ``line`` in the legend."""

    rank: int
    status: str
    short: str  # "returned", "raised RuntimeError", "crashed: SIGKILL", "hung"
    line: str
    traceback: str = ""


@dataclass(frozen=True)
class Span:
    """One site call on a rank, in seconds from the timeline's origin."""

    site: str
    start: float
    end: float
    depth: int
    step: int | None
    seq: int = 0  # a collective's sequence number on its rank; 0 for other sites
    raised: str = ""  # "raised RuntimeError" when the call raised
    open: bool = False  # entered and never left

    @property
    def label(self) -> str:
        """``#7 barrier`` for a collective, else the site without its library prefix."""
        name = self.site.partition(".")[2] or self.site
        return f"#{self.seq} {name}" if self.seq else name

    def describe(self) -> str:
        """The tooltip: ``#7 barrier (dist.barrier) at step 3, 1.2 ms, raised RuntimeError``."""
        step = "" if self.step is None else f" at step {self.step}"
        how = "never left" if self.open else self.raised
        return f"{self.label} ({self.site}){step}, {_duration(self.end - self.start)}" + (
            f", {how}" if how else ""
        )


@dataclass(frozen=True)
class Mark:
    """A point on a lane: a fault fired, a step or an epoch began."""

    time: float
    kind: str
    text: str


@dataclass
class Lane:
    """One rank: its spans, its marks, and how (and when) it ended."""

    rank: int
    end: RankEnd
    spans: list[Span] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    last: float = 0.0  # where the lane ends: its last event, or the timeline's end if hung


@dataclass(frozen=True)
class Wavefront:
    """Where the ranks' collective sequences first differ."""

    seq: int
    sites: dict[int, str]  # rank -> the collective it entered under ``seq``; "" if none

    def line(self) -> str:
        """``collective #8: rank 0 in dist.barrier, rank 1 never reached it``."""
        parts = [
            f"rank {rank} in {site}" if site else f"rank {rank} never reached it"
            for rank, site in sorted(self.sites.items())
        ]
        return f"the ranks part ways at collective #{self.seq}: " + ", ".join(parts)


@dataclass
class Timeline:
    header: Header
    lanes: list[Lane]
    duration: float
    wavefront: Wavefront | None = None
    traced: bool = False  # whether the run recorded spans (World.run(..., trace=True))
    never_fired: list[str] = field(default_factory=list)


def build(header: Header, events: Iterable[Event], ends: Iterable[RankEnd]) -> Timeline:
    """The timeline of one example's events; ``ends`` gives each rank's lane."""
    events = sorted(events, key=lambda e: (e.time, e.rank))
    origin = events[0].time if events else 0.0
    duration = max((e.time - origin for e in events), default=0.0)
    lanes = {end.rank: Lane(end.rank, end) for end in ends}
    by_rank: dict[int, list[Event]] = {rank: [] for rank in lanes}
    for event in events:
        by_rank.setdefault(event.rank, []).append(event)
    for rank, mine in by_rank.items():
        lane = lanes.setdefault(rank, Lane(rank, RankEnd(rank, "?", "?", f"rank {rank}")))
        hung = lane.end.status == HUNG
        lane.last = duration if hung or not mine else mine[-1].time - origin
        lane.spans = _spans(mine, origin, lane.last)
        lane.marks = _marks(mine, origin)
    ordered = [lanes[rank] for rank in sorted(lanes)]
    never = sorted({f"{e.fault}: {e.detail}" for e in events if e.kind == NEVER_FIRED})
    timeline = Timeline(header, ordered, duration, None, any(e.kind == ENTER for e in events))
    timeline.never_fired = never
    if header.status == HUNG:
        timeline.wavefront = wavefront(ordered)
    return timeline


def _spans(events: list[Event], origin: float, lane_end: float) -> list[Span]:
    """Pair each ``exit`` with its ``enter`` (calls nest: the innermost open one); a new
    process on the rank (a restart) leaves its predecessor's open spans open."""
    spans: list[Span] = []
    stack: list[Event] = []
    pid = None
    for event in events:
        if event.kind not in (ENTER, EXIT):
            continue
        if event.pid != pid:
            spans += _close(stack, origin, lane_end)
            stack, pid = [], event.pid
        if event.kind == ENTER:
            stack.append(event)
            continue
        while stack:
            enter = stack.pop()
            if (enter.site, enter.call) == (event.site, event.call):
                spans.append(_span(enter, len(stack), origin, event.time - origin, event.detail))
                break
            spans.append(_span(enter, len(stack), origin, lane_end, "", opened=True))
    spans += _close(stack, origin, lane_end)
    return sorted(spans, key=lambda s: (s.start, s.depth))


def _close(stack: list[Event], origin: float, lane_end: float) -> list[Span]:
    return [_span(e, depth, origin, lane_end, "", opened=True) for depth, e in enumerate(stack)]


def _span(
    enter: Event, depth: int, origin: float, end: float, raised: str, opened: bool = False
) -> Span:
    start = enter.time - origin
    seq = int(enter.detail[1:]) if enter.detail.startswith("#") else 0
    return Span(enter.site, start, max(end, start), depth, enter.step, seq, raised, opened)


def _marks(events: list[Event], origin: float) -> list[Mark]:
    marks: list[Mark] = []
    step: int | None = None
    epochs = 0
    epoch_step: object = object()  # the step of the last epoch mark (hooks run twice)
    for event in events:
        at = event.time - origin
        if event.kind == FIRED:
            marks.append(Mark(at, FAULT, event.fault))
        elif event.kind == SURFACED:
            marks.append(Mark(at, FAULT, f"deferred OOM surfaced: {event.detail}"))
        elif event.kind != ENTER:
            continue
        elif event.site == EPOCH_SITE and event.step != epoch_step:
            marks.append(Mark(at, EPOCH, f"epoch {epochs}"))
            epochs, epoch_step = epochs + 1, event.step
        if event.kind == ENTER and event.step is not None and event.step != step:
            step = event.step
            marks.append(Mark(at, STEP, f"step {step}"))
    return marks


def wavefront(lanes: list[Lane]) -> Wavefront | None:
    """The first collective number at which the ranks differ, if they do."""
    sequences = {lane.rank: {s.seq: s.site for s in lane.spans if s.seq} for lane in lanes}
    last = max((max(seqs, default=0) for seqs in sequences.values()), default=0)
    for seq in range(1, last + 1):
        sites = {rank: seqs.get(seq, "") for rank, seqs in sequences.items()}
        if len(set(sites.values())) > 1:
            return Wavefront(seq, sites)
    return None


# -- the text form ------------------------------------------------------------------------
def render_text(timeline: Timeline, head: int = HEAD_ROWS, tail: int = TAIL_ROWS) -> str:
    """One column per rank: steps, epochs, faults, collectives and each rank's end, in time
    order; the middle elided so that the start and the end always show."""
    lanes = timeline.lanes
    width = max(20, min(52, (TEXT_WIDTH - 10) // max(len(lanes), 1)))
    rows = _rows(timeline)
    lines = [
        f"timeline ({len(lanes)} ranks, {timeline.duration:.3f} s from the first event"
        + ("" if timeline.traced else "; not traced: faults and ends only")
        + ")",
        (f"{'time s':>9}  " + "".join(f"{'rank ' + str(r.rank):<{width}}" for r in lanes)).rstrip(),
    ]
    columns = {lane.rank: index for index, lane in enumerate(lanes)}
    shown = rows if len(rows) <= head + tail else [*rows[:head], None, *rows[-tail:]]
    for row in shown:
        if row is None:
            lines.append(f"{'':>9}  … {len(rows) - head - tail} rows …")
            continue
        cells = [""] * len(lanes)
        for rank, text in row[1].items():
            cells[columns[rank]] = clip(text, width - 2, one_line=True)
        lines.append(f"{row[0]:>9.4f}  " + "".join(f"{c:<{width}}" for c in cells).rstrip())
    if timeline.wavefront is not None:
        lines.append(timeline.wavefront.line())
    return "\n".join(lines)


def _rows(timeline: Timeline) -> list[tuple[float, dict[int, str]]]:
    """Items of all ranks by time; items of different ranks close in time share a row."""
    items: list[tuple[float, int, str]] = []
    for lane in timeline.lanes:
        items += [(m.time, lane.rank, _mark_text(m)) for m in lane.marks]
        for span in lane.spans:
            if span.seq:
                items.append((span.start, lane.rank, span.label + _how(span)))
        items.append((lane.last, lane.rank, f"END {lane.end.short}"))
    items.sort(key=lambda item: item[0])
    rows: list[tuple[float, dict[int, str]]] = []
    newest: dict[int, int] = {}  # per rank, the last row it has a cell in
    for at, rank, text in items:
        index = _row_for(rows, newest.get(rank, -1), at, text)
        if index is None:
            rows.append((at, {}))
            index = len(rows) - 1
        rows[index][1][rank] = text
        newest[rank] = index
    return rows


def _row_for(
    rows: list[tuple[float, dict[int, str]]], after: int, at: float, text: str
) -> int | None:
    """A recent row this rank's item may join (its own order kept): one where another
    rank did the same thing, however late (``step 3``, or collective ``#7``: beside
    ``#7 barrier`` goes ``#7 barrier`` and also a mismatched ``#7 broadcast``), else the
    last row if it is close in time."""
    recent = range(max(after + 1, len(rows) - 8), len(rows))
    key = _key(text)
    same = [i for i in recent if key in map(_key, rows[i][1].values())]
    if same:
        return same[0]
    last = len(rows) - 1
    return last if last in recent and at - rows[last][0] <= MERGE_S else None


def _key(text: str) -> str:
    """What makes two ranks' items the same: a collective's number, else the whole text."""
    return text.split(" ", 1)[0] if text.startswith("#") else text


def _how(span: Span) -> str:
    """`` (never left)``, `` (1.07 s, raised RuntimeError)``: what a text row adds."""
    took = span.end - span.start
    parts = [_duration(took)] if took >= 0.1 else []
    parts += ["never left"] if span.open else [span.raised] if span.raised else []
    return f" ({', '.join(parts)})" if parts else ""


def _mark_text(mark: Mark) -> str:
    return f"FIRED {mark.text}" if mark.kind == FAULT else mark.text


def _duration(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms" if seconds < 1 else f"{seconds:.2f} s"
