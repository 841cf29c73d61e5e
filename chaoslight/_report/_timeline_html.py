"""The timeline as one self-contained HTML page: inline CSS and SVG, no script, nothing
fetched, so it opens anywhere (an air-gapped cluster's login node included).

The page: the verdict and the root cause, the wavefront of a hang, the schedule and the
replay command; one lane per rank over wall time, with step and epoch marks, spans of
hooks and collectives (tooltips say which call, at which step, for how long), faults as
red markers, and each rank's end; then each rank's end in words, the text form and the
tracebacks (folded). A fit makes thousands of calls: spans too narrow to see are drawn as
one bundle per few pixels, and a lane never holds more than ``MAX_SHAPES`` shapes, so a
10 000-span run is still a small file.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from html import escape

from chaoslight._report._timeline import (
    EPOCH,
    FAULT,
    STEP,
    Lane,
    Span,
    Timeline,
    render_text,
)
from chaoslight._schedule._clip import clip

WIDTH, LEFT, RIGHT = 1200.0, 96.0, 190.0  # SVG units: lane labels left, ends right
AXIS_H, MARK_H, ROW_H, GAP = 26.0, 28.0, 14.0, 12.0  # marks: faults above, steps below
MAX_DEPTH = 5  # deeper calls share the last row
MAX_SHAPES = 600  # per lane: bundles grow wider until the lane fits
MIN_LABEL_PX = 7.0  # per character of a label drawn inside its span

STEP_SITES = {f"lightning.{s}_step" for s in ("training", "validation", "test", "predict")}
COMPUTE = {"lightning.forward", "lightning.backward", "lightning.optimizer_step"}
IO = {"torch.save", "torch.load", "lightning.save_checkpoint", "lightning.load_checkpoint"}

CSS = """
body{font:14px system-ui,sans-serif;margin:16px;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 6px} h2{font-size:13px;margin:10px 0 2px;color:#555}
.badge{padding:1px 8px;border-radius:4px;color:#fff;margin-right:8px}
.passed .badge{background:#2e7d32}.failed .badge{background:#c62828}
.hung .badge{background:#6a1b9a}.crashed .badge{background:#4e342e}
pre{background:#f5f5f5;padding:6px 8px;margin:0;white-space:pre-wrap;font-size:12px}
.meta{display:flex;gap:16px}.meta>div{flex:1}
#wavefront{color:#ad1457;font-weight:bold}
svg{width:100%;height:auto;border:1px solid #ddd;margin-top:10px}
svg text{font:11px system-ui,sans-serif;fill:#222}
.axis line{stroke:#ccc}.axis text{fill:#777}
.lane-bg{fill:#fafafa}.lane-label{font-weight:bold}
rect.span{stroke:#fff;stroke-width:.3}rect.span:hover{stroke:#000;stroke-width:1}
.c-step{fill:#43a047}.c-compute{fill:#9ccc65}.c-coll{fill:#fb8c00}.c-hook{fill:#64b5f6}
.c-io{fill:#ab47bc}.c-other{fill:#b0bec5}.bundle{fill:#90a4ae;opacity:.75}
rect.raised{stroke:#c62828;stroke-width:1.5}
rect.open{stroke:#000;stroke-width:1;stroke-dasharray:3 2}
rect.wavefront{stroke:#d81b60;stroke-width:3}
text.wavefront{fill:#d81b60;font-weight:bold}
.stepline{stroke:#cfd8dc}.epochline{stroke:#546e7a;stroke-width:1.5}
.fault{fill:#d50000}text.fault{fill:#d50000;font-weight:bold}
.end-passed{fill:#2e7d32}.end-failed,.end-released{fill:#c62828}
.end-hung{fill:#6a1b9a}.end-crashed{fill:#4e342e}
table{border-collapse:collapse;margin-top:10px}
td,th{border-bottom:1px solid #eee;padding:3px 8px;text-align:left;vertical-align:top}
td:first-child{white-space:nowrap}.legend{font-size:12px;color:#555;margin-top:4px}
.legend i{display:inline-block;width:10px;height:10px;margin:0 3px 0 10px}
details{margin-top:8px}
"""


LEGEND = (
    "<div class='legend'>"
    + "".join(
        f"<i style='background:{colour}'></i>{what}"
        for colour, what in (
            ("#43a047", "step"),
            ("#9ccc65", "forward, backward, optimizer step"),
            ("#fb8c00", "collective (#n: its sequence number on the rank)"),
            ("#64b5f6", "hook"),
            ("#ab47bc", "checkpoint, save, load"),
            ("#90a4ae", "calls too short to draw apart"),
            ("#d50000", "fault fired; red outline: the call raised; dashed: never left"),
        )
    )
    + "</div>"
)


@dataclass(frozen=True)
class Shape:
    """One rectangle on a lane: a span, or a bundle of spans too narrow to draw apart."""

    x: float
    w: float
    depth: int
    css: str
    title: str
    label: str = ""


# In every page's head: how ``--out``'s page is known as chaoslight's own, to overwrite.
HTML_MARKER = '<meta name="generator" content="chaoslight">'


def render_html(timeline: Timeline, text_rows: int = 200) -> str:
    """The page (see the module docstring)."""
    head = timeline.header
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        HTML_MARKER,
        f"<title>chaoslight timeline: {escape(head.target)}</title>",
        f"<style>{CSS}</style></head><body>",
        _header(timeline),
        _svg(timeline),
        LEGEND,
        _ranks_table(timeline),
        "<details><summary>text form</summary><pre id='text-form'>"
        + escape(render_text(timeline, head=text_rows // 2, tail=text_rows // 2))
        + "</pre></details>",
    ]
    for lane in timeline.lanes:
        if lane.end.traceback:
            parts.append(
                f"<details><summary>rank {lane.rank}: traceback</summary>"
                f"<pre>{escape(lane.end.traceback)}</pre></details>"
            )
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _header(timeline: Timeline) -> str:
    head = timeline.header
    out = [
        f"<header class='{escape(head.status)}'>",
        f"<h1><span class='badge' id='status'>{escape(head.status.upper())}</span>"
        f"{escape(head.target)} <small>({head.wall_s:.2f} s)</small></h1>",
    ]
    if head.verdict:
        out.append(f"<p id='verdict'><b>verdict:</b> {escape(head.verdict)}</p>")
    if head.cause and head.cause not in head.verdict:
        out.append(f"<p id='cause'><b>root cause first:</b> {escape(head.cause)}</p>")
    if timeline.wavefront is not None:
        out.append(f"<p id='wavefront'>{escape(timeline.wavefront.line())}</p>")
    if not timeline.traced:
        out.append(
            "<p><i>Recorded without tracing: faults and ends only. Run with "
            "<code>World.run(..., trace=True)</code> or <code>chaoslight replay FILE "
            "--html OUT</code> for every hook and collective.</i></p>"
        )
    out.append("<div class='meta'><div><h2>schedule</h2>")
    out.append(f"<pre id='schedule'>{escape(head.schedule or '(empty: no fault)')}</pre>")
    for line in timeline.never_fired:
        out.append(f"<div>never fired: {escape(line)}</div>")
    out.append("</div>")
    if head.replay:
        out.append(f"<div><h2>replay</h2><pre id='replay'>{escape(head.replay)}</pre></div>")
    out.append("</div></header>")
    return "\n".join(out)


def _ranks_table(timeline: Timeline) -> str:
    rows = "".join(
        f"<tr><td>rank {lane.rank}</td><td class='end-{escape(lane.end.status)}'>"
        f"{escape(lane.end.status)}</td><td>{escape(lane.end.line)}</td></tr>"
        for lane in timeline.lanes
    )
    head = "<tr><th>rank</th><th>status</th><th>how it ended</th></tr>"
    return f"<table id='ranks'>{head}{rows}</table>"


# -- the lanes ------------------------------------------------------------------------------
def _svg(timeline: Timeline) -> str:
    scale = (WIDTH - LEFT - RIGHT) / max(timeline.duration, 1e-6)
    heights = [MARK_H + _rows_of(lane) * ROW_H for lane in timeline.lanes]
    total = AXIS_H + sum(h + GAP for h in heights)
    out = [
        f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {WIDTH:.0f} {total:.0f}' "
        f"width='{WIDTH:.0f}' height='{total:.0f}' id='timeline'>",
        _axis(timeline.duration, scale, total),
    ]
    y = AXIS_H
    for lane, height in zip(timeline.lanes, heights, strict=True):
        out.append(_lane(timeline, lane, y, height, scale))
        y += height + GAP
    out.append("</svg>")
    return "\n".join(out)


def _rows_of(lane: Lane) -> int:
    return min(MAX_DEPTH, 1 + max((s.depth for s in lane.spans), default=0))


def _axis(duration: float, scale: float, total: float) -> str:
    step = _tick(duration)
    out = ["<g class='axis'>"]
    for index in range(int(duration / step) + 1):
        t = index * step
        x = LEFT + t * scale
        label = f"{t * 1000:.0f} ms" if duration < 2 else f"{t:g} s"
        out.append(f"<line x1='{x:.1f}' y1='{AXIS_H - 6}' x2='{x:.1f}' y2='{total:.0f}'/>")
        out.append(f"<text x='{x + 2:.1f}' y='{AXIS_H - 10}'>{label}</text>")
    out.append("</g>")
    return "".join(out)


def _tick(duration: float) -> float:
    """A round step (1, 2 or 5 times a power of ten) giving about eight ticks."""
    raw = max(duration, 1e-6) / 8
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def _lane(timeline: Timeline, lane: Lane, y: float, height: float, scale: float) -> str:
    end = lane.end
    out = [
        f"<g class='lane' id='lane-{lane.rank}' data-rank='{lane.rank}'>",
        f"<rect class='lane-bg' x='{LEFT:.0f}' y='{y:.1f}' width='{WIDTH - LEFT - RIGHT:.0f}' "
        f"height='{height:.1f}'/>",
        f"<text class='lane-label' x='8' y='{y + 14:.1f}'>rank {lane.rank}</text>",
        f"<text x='8' y='{y + 28:.1f}' class='end-{escape(end.status)}'>"
        f"{escape(end.status)}</text>",
    ]
    out += _marks(lane, y, height, scale)
    seq = timeline.wavefront.seq if timeline.wavefront is not None else 0
    for shape in shapes(lane.spans, scale, seq):
        out.append(_rect(shape, y))
    out += _wavefront_labels(lane, seq, y, scale)
    x_end = LEFT + lane.last * scale
    out.append(
        f"<rect class='end-{escape(end.status)}' x='{x_end - 1:.1f}' y='{y:.1f}' width='3' "
        f"height='{height:.1f}'><title>{escape(end.line)}</title></rect>"
    )
    out.append(
        f"<text class='end end-{escape(end.status)}' x='{WIDTH - RIGHT + 8:.0f}' "
        f"y='{y + 14:.1f}'>{escape(clip(end.short, 30))}<title>{escape(end.line)}</title></text>"
    )
    out.append("</g>")
    return "\n".join(out)


def _marks(lane: Lane, y: float, height: float, scale: float) -> list[str]:
    """Step and epoch lines (thinned to a few pixels apart), faults as red markers."""
    out: list[str] = []
    last_line = last_label = -1e9
    for mark in lane.marks:
        x = LEFT + mark.time * scale
        if mark.kind == FAULT:
            out.append(_fault(mark.text, x, y))
            continue
        if mark.kind not in (STEP, EPOCH) or (mark.kind == STEP and x - last_line < 3):
            continue
        last_line = x
        css = "epochline" if mark.kind == EPOCH else "stepline"
        out.append(
            f"<line class='{css}' x1='{x:.1f}' y1='{y:.1f}' x2='{x:.1f}' y2='{y + height:.1f}'>"
            f"<title>{escape(mark.text)}</title></line>"
        )
        if x - last_label >= 40 or mark.kind == EPOCH:
            last_label = x
            short = mark.text if mark.kind == EPOCH else "s" + mark.text.split()[-1]
            out.append(f"<text x='{x + 2:.1f}' y='{y + MARK_H - 4:.1f}'>{escape(short)}</text>")
    return out


def _fault(text: str, x: float, y: float) -> str:
    """A red marker; its text to the right, or to the left when the lane ends too soon."""
    room = (WIDTH - RIGHT - x) / 6.5
    anchor, at = ("start", x + 6) if room >= min(len(text), 30) else ("end", x - 6)
    return (
        f"<path class='fault' d='M{x - 5:.1f} {y + 1:.1f}h10l-5 9z'>"
        f"<title>{escape(text)}</title></path><text class='fault' text-anchor='{anchor}' "
        f"x='{at:.1f}' y='{y + 10:.1f}'>{escape(text)}<title>{escape(text)}</title></text>"
    )


def _rect(shape: Shape, y: float) -> str:
    top = y + MARK_H + min(shape.depth, MAX_DEPTH - 1) * ROW_H
    out = (
        f"<rect class='span {shape.css}' x='{LEFT + shape.x:.1f}' y='{top:.1f}' "
        f"width='{shape.w:.1f}' height='{ROW_H - 2:.0f}'>"
        f"<title>{escape(shape.title)}</title></rect>"
    )
    if shape.label and shape.w >= MIN_LABEL_PX * len(shape.label) + 4:
        out += (
            f"<text x='{LEFT + shape.x + 2:.1f}' y='{top + ROW_H - 4:.1f}'>"
            f"{escape(shape.label)}</text>"
        )
    return out


def _wavefront_labels(lane: Lane, seq: int, y: float, scale: float) -> list[str]:
    """The collectives at the wavefront, labelled however narrow; or that it never came."""
    if not seq:
        return []
    at = [s for s in lane.spans if s.seq == seq]
    if not at:
        x = LEFT + lane.last * scale
        where = f"x='{x + 4:.1f}' y='{y + 24:.1f}'"
        return [f"<text class='wavefront' {where}>never reached #{seq}</text>"]
    span = at[0]
    top = y + MARK_H + min(span.depth, MAX_DEPTH - 1) * ROW_H
    x = LEFT + span.start * scale
    where = f"x='{x + 2:.1f}' y='{top + ROW_H + 10:.1f}'"
    return [f"<text class='wavefront' {where}>{escape(span.label)}</text>"]


# -- aggregation ----------------------------------------------------------------------------
def shapes(spans: list[Span], scale: float, wavefront_seq: int = 0) -> list[Shape]:
    """The shapes that draw ``spans``: spans that matter (open, raised, at the wavefront)
    always on their own; others on their own when wide enough, else bundled with their
    neighbours, with bundles widened until the lane holds at most ``MAX_SHAPES``."""
    kept = [s for s in spans if s.open or s.raised or (wavefront_seq and s.seq == wavefront_seq)]
    ids = {id(s) for s in kept}
    rest = [s for s in spans if id(s) not in ids]
    own = [_shape(s, scale, s.seq == wavefront_seq and wavefront_seq > 0) for s in kept]
    bundle_px = 1.0
    while True:
        drawn = own + _bundled(rest, scale, bundle_px)
        if len(drawn) <= MAX_SHAPES or bundle_px > WIDTH:
            return drawn
        bundle_px *= 2


def _bundled(spans: list[Span], scale: float, bundle_px: float) -> list[Shape]:
    out: list[Shape] = []
    for depth in sorted({s.depth for s in spans}):
        group: list[Span] = []
        for span in (s for s in spans if s.depth == depth):
            wide = (span.end - span.start) * scale >= bundle_px
            if group and (wide or span.start * scale > group[-1].end * scale + bundle_px):
                out.append(_group(group, scale))
                group = []
            if wide:
                out.append(_shape(span, scale))
            else:
                group.append(span)
        if group:
            out.append(_group(group, scale))
    return out


def _shape(span: Span, scale: float, at_wavefront: bool = False) -> Shape:
    css = _colour(span.site)
    css += " raised" if span.raised else ""
    css += " open" if span.open else ""
    css += " wavefront" if at_wavefront else ""
    width = max((span.end - span.start) * scale, 2.0)
    return Shape(span.start * scale, width, span.depth, css, span.describe(), span.label)


def _group(group: list[Span], scale: float) -> Shape:
    if len(group) == 1:
        return _shape(group[0], scale)
    start, end = group[0].start, max(s.end for s in group)
    counts = Counter(s.label if not s.seq else s.site for s in group)
    seqs = [s.seq for s in group if s.seq]
    what = ", ".join(f"{name} x{n}" for name, n in counts.most_common(4))
    more = f", #{min(seqs)} to #{max(seqs)}" if seqs else ""
    title = f"{len(group)} calls, {start:.4f} to {end:.4f} s: {what}{more}"
    width = max((end - start) * scale, 1.0)
    return Shape(start * scale, width, group[0].depth, "bundle", title)


def _colour(site: str) -> str:
    if site in STEP_SITES:
        return "c-step"
    if site in COMPUTE:
        return "c-compute"
    if site.startswith("dist."):
        return "c-coll"
    if site in IO:
        return "c-io"
    return "c-hook" if site.startswith("lightning.") else "c-other"
