"""The files ``fuzz`` writes (``--out``, the timeline page beside it, ``--emit-test``) never
replace a file chaoslight did not write without saying so.

chaoslight knows its own files by what it puts in them: a failure file is JSON with a
``"chaoslight_failure"`` key, a timeline page has ``HTML_MARKER`` in its head, an emitted
test starts with ``EMITTED_TEST_HEADER``. A path that holds anything else is refused when
the arguments are read (a usage error, before the campaign starts); if such a file appears
while the campaign runs, the result is written beside it under another name, and the
command says so: a found failure is never lost.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from chaoslight._cli._usage import UsageError
from chaoslight._report import HTML_MARKER, html_beside
from chaoslight._search._failure import EMITTED_TEST_HEADER

_HEAD_BYTES = 4096  # where a page's marker and a test's first line are
_MAX_FAILURE_BYTES = 16 << 20
_OTHER_NAMES = 1000


def _is_failure_file(path: Path) -> bool:
    if path.stat().st_size > _MAX_FAILURE_BYTES:
        return False
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(doc, dict) and "chaoslight_failure" in doc


def _head(path: Path) -> str:
    with open(path, "rb") as handle:
        return handle.read(_HEAD_BYTES).decode("utf-8", errors="replace")


def _is_page(path: Path) -> bool:
    head = _head(path)  # a page written before the marker existed has chaoslight's title
    return HTML_MARKER in head or "<title>chaoslight timeline: " in head


def _is_emitted_test(path: Path) -> bool:
    return _head(path).startswith(EMITTED_TEST_HEADER)


Recognise = Callable[[Path], bool]


def may_write(path: Path, ours: Recognise) -> bool:
    """Whether writing ``path`` loses nothing: no file there, or one chaoslight wrote."""
    try:
        if not path.exists():
            return True
        return path.is_file() and ours(path)
    except OSError:
        return False


class Outputs:
    """The files one ``fuzz`` writes, checked when made (before the campaign starts) and
    again just before each write (``failure_file``, ``page``, ``test_file``)."""

    def __init__(self, args: argparse.Namespace, say: Callable[[str], None] = print) -> None:
        self.out = Path(args.out)
        self.html = not args.no_html
        self.test = Path(args.emit_test) if args.emit_test else None
        self.say = say
        self.check()

    def check(self) -> None:
        """Refuse, in one line, an output path that holds a file chaoslight did not write."""
        if not may_write(self.out, _is_failure_file):
            raise UsageError(_refusal("--out", self.out, "a chaoslight failure file"))
        if self.html and not may_write(html_beside(self.out), _is_page):
            raise UsageError(
                _refusal("--out", html_beside(self.out), "a chaoslight timeline page")
                + " (or pass --no-html)"
            )
        if self.test is not None and not may_write(self.test, _is_emitted_test):
            raise UsageError(_refusal("--emit-test", self.test, "a test chaoslight emitted"))

    def failure_file(self) -> Path:
        """Where to write the failure file now: ``--out``, or a free name beside it (with
        its page's name free too) if a file chaoslight did not write appeared there."""

        def free(path: Path) -> bool:
            page = not self.html or may_write(html_beside(path), _is_page)
            return may_write(path, _is_failure_file) and page

        if not free(self.out):
            self.out = self._moved(self.out, free)
        return self.out

    def page(self) -> Path | None:
        """The timeline page beside the failure file, or None (said why) if a file
        chaoslight did not write appeared there since."""
        page = html_beside(self.out)
        if may_write(page, _is_page):
            return page
        self.say(f"note: {page} exists and chaoslight did not write it: no timeline written")
        return None

    def test_file(self) -> Path:
        """Where to emit the test now: ``--emit-test``, or a free name beside it."""
        assert self.test is not None
        if not may_write(self.test, _is_emitted_test):
            self.test = self._moved(self.test, lambda p: may_write(p, _is_emitted_test))
        return self.test

    def _moved(self, path: Path, free: Callable[[Path], bool]) -> Path:
        for number in range(1, _OTHER_NAMES):
            other = path.with_name(f"{path.stem}.{number}{path.suffix}")
            if free(other):
                self.say(
                    f"note: {path} appeared meanwhile and chaoslight did not write it: "
                    f"writing {other} instead"
                )
                return other
        other = path.with_name(f"{path.stem}.{os.getpid()}-{time.time_ns()}{path.suffix}")
        self.say(f"note: {path} is not chaoslight's: writing {other} instead")
        return other


def check_page(option: str, path: str | None) -> None:
    """Refuse a page path (``replay --html``) that holds a file chaoslight did not write."""
    if path is not None and not may_write(Path(path), _is_page):
        raise UsageError(_refusal(option, Path(path), "a chaoslight timeline page"))


def _refusal(option: str, path: Path, what: str) -> str:
    return (
        f"{option}: {str(path)!r} exists and is not {what}; chaoslight will not overwrite "
        "it: give another path or move that file"
    )
