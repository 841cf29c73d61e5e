"""Each thread's view of the sites: which it is inside, and whether its calls are
chaoslight's own. A DataLoader worker thread or a user thread calling a site must
neither see the main thread's sites as its own nor pop the main thread's entries; a
watchdog reads another thread's stack by its ident."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

SiteEntry = tuple[str, int, int | None]  # (site, call # on this rank, step)


class PerThread(threading.local):
    """One thread's view: how deep it is in chaoslight's own calls (``depth``), the sites
    it is inside (``inside``), their entries (``stack``, outermost first), and its calls
    of sites that could not fire, not yet counted (``passed``, from ``_live.Tally``).

    ``depth`` is a class default, as a missing attribute costs an exception on every
    lookup; the others are made per thread, the stack registered by thread ident so that
    another thread (a watchdog) can read it, the count by ``counter`` (a decision reads it).
    """

    depth = 0

    def __init__(
        self, stacks: dict[int, list[SiteEntry]], counter: Callable[[], Counter[str]]
    ) -> None:
        self.inside: set[str] = set()
        self.stack: list[SiteEntry] = []
        self.passed = counter()
        stacks[threading.get_ident()] = self.stack


class InternalCalls:
    """A context in which this thread's calls are chaoslight's own: they pass through
    every site (``Engine.internal()``), and ``quiet`` (a pause and a resume: a CPU memory
    budget's allocator) is told when the thread goes in and when it comes out."""

    def __init__(
        self,
        local: threading.local,
        quiet: tuple[Callable[[], None], Callable[[], None]] | None = None,
    ) -> None:
        self.local = local
        self.quiet = quiet

    def __enter__(self) -> None:
        depth = self.local.depth = getattr(self.local, "depth", 0) + 1
        if depth == 1 and self.quiet is not None:
            self.quiet[0]()

    def __exit__(self, *exc: object) -> None:
        self.local.depth -= 1
        if self.local.depth == 0 and self.quiet is not None:
            self.quiet[1]()
