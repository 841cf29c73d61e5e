"""``Vocabulary``: the base of chaoslight's closed sets of words (statuses, severities,
rules, phases). A member is a ``str``: it equals, hashes, prints and serialises as its
value (``"hung"``), so files, messages and comparisons with plain text read as before.
(``enum.StrEnum`` would do, from Python 3.11; chaoslight supports 3.10.)"""

from __future__ import annotations

from enum import Enum


class Vocabulary(str, Enum):
    """A closed set of words; ``str(member)`` and ``f"{member}"`` are its value."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)
