"""Layer 4, the report: a run's record and how it reads.

The outcome of an example as data (``Outcome``, ``RankResult``, ``ExceptionInfo``, the
statuses) and every way it is shown: the summary and text report, the timeline as a text
table and as an HTML page, what the terminal prints of a failure, the known-issue block.
It sits right above the runtime, whose event log it draws, and below the World and the
search, which return its objects: an ``Outcome`` renders itself without reaching up.
"""

from __future__ import annotations

from chaoslight._report._known import known_issue_block
from chaoslight._report._outcome import Outcome, overall, settle
from chaoslight._report._records import ExceptionInfo, RankResult
from chaoslight._report._status import (
    CRASHED,
    FAILED,
    HUNG,
    PASSED,
    RANK_STATUSES,
    RELEASED,
    STATUSES,
    Status,
)
from chaoslight._report._terminal import html_beside, show_cause_traceback, show_timeline
from chaoslight._report._text import cause_first, death_line, signal_name
from chaoslight._report._timeline_html import HTML_MARKER

__all__ = [
    "CRASHED",
    "FAILED",
    "HTML_MARKER",
    "HUNG",
    "PASSED",
    "RANK_STATUSES",
    "RELEASED",
    "STATUSES",
    "ExceptionInfo",
    "Outcome",
    "RankResult",
    "Status",
    "cause_first",
    "death_line",
    "html_beside",
    "known_issue_block",
    "overall",
    "settle",
    "show_cause_traceback",
    "show_timeline",
    "signal_name",
]
