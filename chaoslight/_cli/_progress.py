"""The fuzz progress display: a live rich panel on a terminal, plain lines in CI logs.

Both end with the final counts (the same the summary prints), and a campaign stopped by
Ctrl-C still says how far it got.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

PLAIN_EVERY_S = 5.0
_REPORTED = "_chaoslight_reported"  # set on a Ctrl-C the display has said how far it got


def reported(interrupt: KeyboardInterrupt) -> bool:
    """Whether a display has already said what this Ctrl-C stopped."""
    return bool(getattr(interrupt, _REPORTED, False))


class Display:
    """Shows phase, examples run, whether a failure was found and examples per minute."""

    def __init__(self, title: str, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True, highlight=False)
        self.title = title
        self.live: Live | None = None
        self.progress: Any = None  # the latest counters
        self._last_line = 0.0
        self._last_printed = ""
        self._phase = ""

    def __enter__(self) -> Display:
        if self.console.is_terminal:
            self.live = Live(self._panel(), console=self.console, refresh_per_second=4)
            self.live.__enter__()
        else:
            self._print(f"chaoslight fuzz: {self.title}")
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, *rest: object) -> None:
        if self.live is not None:
            self.live.update(self._panel())  # the last frame stays, with the final counts
            self.live.__exit__(None, None, None)
        elif self.progress is not None and self._line() != self._last_printed:
            self._print(self._line())
        if isinstance(exc, KeyboardInterrupt):
            self._print(self.interrupted())
            setattr(exc, _REPORTED, True)

    def update(self, progress: Any) -> None:
        phase_changed = self.progress is None or progress.phase != self._phase
        self.progress, self._phase = progress, progress.phase
        if self.live is not None:
            self.live.update(self._panel())
            return
        now = time.monotonic()
        if phase_changed or now - self._last_line >= PLAIN_EVERY_S:
            self._last_line = now
            self._print(self._line())

    def warn(self, line: str) -> None:
        """A warning the campaign survives (the shared database failed): printed once, as
        it comes, above the live panel."""
        self._print(line)

    def interrupted(self) -> str:
        """What a Ctrl-C leaves: how far the campaign got."""
        progress = self.progress
        if progress is None:
            return "chaoslight fuzz: interrupted (Ctrl-C) while starting the World"
        found = (
            "a failure was found but not minimised or written; run again to finish it"
            if progress.failures
            else "no failure found so far"
        )
        elapsed = time.monotonic() - progress.started
        return (
            f"chaoslight fuzz: interrupted (Ctrl-C) during {progress.phase}, after "
            f"{progress.examples} examples ({elapsed:.1f} s): {found}"
        )

    def _line(self) -> str:
        progress = self.progress
        found = "yes" if progress.failures else "no"
        return (
            f"[{progress.phase}] examples={progress.examples} failure found={found} "
            f"rate={progress.per_minute:.0f}/min"
        )

    def _print(self, line: str) -> None:
        self._last_printed = line
        self.console.print(line, markup=False, soft_wrap=True)

    def _panel(self) -> Group:
        # The title on a line of its own, cut rather than wrapped: a long target path
        # must not fold the panel.
        title = Text(f"chaoslight fuzz {self.title}", style="bold", no_wrap=True)
        title.overflow = "ellipsis"
        table = Table(show_header=False, box=None, padding=(0, 1))
        table.add_column(style="bold", no_wrap=True)
        table.add_column(no_wrap=True)
        progress = self.progress
        if progress is None:
            table.add_row("phase", "starting the World")
            return Group(title, table)
        table.add_row("phase", progress.phase)
        table.add_row("examples", str(progress.examples))
        table.add_row("failure found", "yes" if progress.failures else "no")
        table.add_row("examples/min", f"{progress.per_minute:.0f}")
        return Group(title, table)
