"""The fuzz progress display: a live rich panel on a terminal, plain lines in CI logs."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

PLAIN_EVERY_S = 5.0


class Display:
    """Shows phase, examples run, failures and examples per minute while a campaign runs."""

    def __init__(self, title: str, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True, highlight=False)
        self.title = title
        self.live: Live | None = None
        self._last_line = 0.0
        self._last_phase = ""

    def __enter__(self) -> Display:
        if self.console.is_terminal:
            self.live = Live(
                self._table(None), console=self.console, refresh_per_second=4, transient=True
            )
            self.live.__enter__()
        else:
            self.console.print(f"chaoslight fuzz: {self.title}", markup=False, soft_wrap=True)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)

    def update(self, progress: Any) -> None:
        if self.live is not None:
            self.live.update(self._table(progress))
            return
        now = time.monotonic()
        if progress.phase != self._last_phase or now - self._last_line >= PLAIN_EVERY_S:
            self._last_phase, self._last_line = progress.phase, now
            self.console.print(
                f"[{progress.phase}] examples={progress.examples} failures={progress.failures} "
                f"rate={progress.per_minute:.0f}/min",
                markup=False,
                soft_wrap=True,
            )

    def _table(self, progress: Any) -> Table:
        table = Table(title=f"chaoslight fuzz {self.title}", show_header=False)
        table.add_column(style="bold")
        table.add_column()
        if progress is None:
            table.add_row("phase", "starting the World")
            return table
        table.add_row("phase", progress.phase)
        table.add_row("examples", str(progress.examples))
        table.add_row("failures", str(progress.failures))
        table.add_row("examples/min", f"{progress.per_minute:.0f}")
        return table
