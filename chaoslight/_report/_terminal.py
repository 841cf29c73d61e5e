"""What the terminal shows of a failure (``fuzz``, ``replay``) besides its verdict: the
timeline (a text table when several ranks took part, an HTML page on disk) and one
traceback, the root cause's. The other ranks' tracebacks go in the HTML page."""

from __future__ import annotations

import os
import sysconfig
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chaoslight._report._culprit import ordered_by_cause
from chaoslight._report._outcome import Outcome
from chaoslight._report._status import FAILED, PASSED

if TYPE_CHECKING:  # rich is imported by the CLI that prints, not by `import chaoslight`
    from rich.console import Console

# Frames of these folders are plumbing to a user reading why a rank failed.
_LIBRARIES = tuple(
    f'  File "{folder}'
    for folder in {
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["platlib"],
        sysconfig.get_paths()["stdlib"],
        str(Path(__file__).resolve().parents[1]),  # chaoslight's own package
    }
)


def html_beside(out: str | os.PathLike[str]) -> Path:
    """``chaoslight-failure.json`` -> ``chaoslight-failure.html``, in the same folder."""
    path = Path(out)
    html = path.with_suffix(".html")
    return html if html != path else path.with_name(path.name + ".timeline.html")


def several_ranks(outcome: Outcome) -> bool:
    """Whether more than one rank did not simply pass: a story the text table tells."""
    return sum(result.status != PASSED for result in outcome.ranks) > 1


def show_timeline(
    console: Console, outcome: Outcome, verdict: Any, html: Path | None, replay: str
) -> None:
    """The text table for a failure of several ranks; the HTML page when ``html`` is given."""
    if verdict.failed and several_ranks(outcome):
        console.print(outcome.timeline_text())
    if html is not None:
        path = outcome.to_html(html, verdict_text=verdict.reason, replay_command=replay)
        console.print(f"timeline: {path} (open it in a browser: a lane per rank)")


def show_cause_traceback(console: Console, outcome: Outcome) -> None:
    """The traceback of the first rank that raised by itself (not released by a peer), the
    culprit's when it raised (``Outcome.culprit``), its library frames hidden but the
    innermost, which says where it was raised."""
    culprit = outcome.culprit
    for result in ordered_by_cause(outcome.ranks, culprit.rank if culprit else None):
        if result.status == FAILED and result.exception and result.exception.traceback:
            lines, hidden = user_frames(result.exception.traceback)
            frames = f"{hidden} frame{'s' if hidden != 1 else ''}"
            more = f"; {frames} of torch, Lightning and chaoslight hidden" if hidden else ""
            console.print(f"rank {result.rank} traceback (the root cause{more}):")
            for line in lines:
                console.print(f"  {line}")
            return


def user_frames(text: str) -> tuple[list[str], int]:
    """A formatted traceback without the frames of installed libraries and chaoslight
    (each section keeps its innermost frame); how many frames were left out."""
    out: list[str] = []
    frames: list[list[str]] = []
    hidden = 0

    def flush() -> None:
        nonlocal hidden
        for index, frame in enumerate(frames):
            if index == len(frames) - 1 or not frame[0].startswith(_LIBRARIES):
                out.extend(frame)
            else:
                hidden += 1
        frames.clear()

    for line in text.rstrip().splitlines():
        if line.startswith('  File "'):
            frames.append([line])
        elif line.startswith("    ") and frames:
            frames[-1].append(line)
        else:
            flush()
            out.append(line)
    flush()
    return out, hidden
