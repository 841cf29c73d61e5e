"""Markdown helpers for the generated reference: docstrings, inline text, tables.

Docstrings are written for ``help()`` with reST-style ````code```` spans; the pages are
Markdown, so spans are converted and the characters Markdown would read as markup
(``<``, ``|``, a lone ``*``) are escaped outside code.
"""

from __future__ import annotations

import html
import inspect
import re
from collections.abc import Iterable, Sequence
from typing import Any

GENERATED_NOTE = (
    '!!! note "Generated"\n'
    "    This page is written from chaoslight's own registries each time the docs are "
    "built (`docs/hooks/`), so it lists exactly what this version has.\n"
)

_SPAN = re.compile(r"(`[^`]*`)")


def _escape_prose(text: str) -> str:
    text = html.escape(text, quote=False).replace("|", "&#124;")
    # A bare '*' (rank=*, "times=*") would open emphasis; list markers are '-' in docstrings.
    return re.sub(r"(?<!\\)\*", r"\\*", text)


def inline(text: str) -> str:
    """One line of prose as Markdown: reST spans become code spans, markup is escaped."""
    text = text.replace("``", "`")
    parts = _SPAN.split(text)
    return "".join(part if part.startswith("`") else _escape_prose(part) for part in parts)


def docstring(obj: Any) -> str:
    """The object's whole docstring as Markdown; indented blocks stay code blocks."""
    doc = inspect.getdoc(obj) or ""
    lines: list[str] = []
    for line in doc.splitlines():
        starts_block = line.startswith(("- ", "    "))
        previous = lines[-1] if lines else ""
        # Markdown needs a blank line between prose and a list or code block after it.
        if starts_block and previous.strip() and not previous.startswith(("- ", "  ")):
            lines.append("")
        lines.append(line if line.startswith("    ") else inline(line))
    return "\n".join(lines)


def first_line(obj: Any) -> str:
    """The docstring's summary (its first paragraph, joined), as Markdown; empty if none."""
    doc = (inspect.getdoc(obj) or "").strip()
    return inline(" ".join(doc.split("\n\n")[0].split())) if doc else ""


class _Annotation(str):
    """A string annotation that prints bare: ``float``, not ``'float'``."""

    def __repr__(self) -> str:
        return str(self)


def signature(obj: Any) -> str:
    """``(a: int = 1, *, b: str = 'x')`` as ``help()`` would show it, annotations unquoted."""
    sig = inspect.signature(obj)
    params = [
        p.replace(annotation=_Annotation(p.annotation)) if isinstance(p.annotation, str) else p
        for p in sig.parameters.values()
    ]
    sig = sig.replace(parameters=params, return_annotation=inspect.Signature.empty)
    return str(sig)


def code(value: Any) -> str:
    """A value as an inline code span; Python-Markdown's tables keep a ``|`` inside one."""
    text = str(value).replace("`", "'")
    return f"`{text}`"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table; cells must already be Markdown."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell.replace("\n", " ") for cell in row) + " |" for row in rows]
    return "\n".join(out) + "\n"


def page(title: str, intro: str, sections: Iterable[str]) -> str:
    """A whole page: title, the generated note, an introduction, then the sections."""
    return "\n".join([f"# {title}\n", GENERATED_NOTE, intro.strip() + "\n", *sections])
