"""Shortening text for one line of a message, report or table: ``clip``.

It sits in the lowest layer because the lowest layer needs it (an error message quoting a
value a hostile file holds); every layer above uses the same one.
"""

from __future__ import annotations

ELLIPSIS = "…"


def clip(text: str, limit: int, *, one_line: bool = False) -> str:
    """``text`` at most ``limit`` characters long: when longer, its first ``limit - 1``
    and ``…``. ``one_line`` first collapses every run of whitespace, newlines included,
    into one space (and drops it at both ends), so that a traceback's message or a
    multi-line repr fits in a table cell."""
    if one_line:
        text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS
