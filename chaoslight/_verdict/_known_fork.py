"""A known issue of the interpreter: a DataLoader worker that never returned from os.fork().

CPython up to 3.11.9 (gh-112275) re-initialises its thread-list lock in a forked child
only after it has taken that lock once: a child forked while another thread of the parent
held it (a thread of torch's or gloo's entering Python for the first time) waits for it
for good. A DataLoader worker forked so never runs a line; the rank waits for its batch
for good, and the rank's peers wait for the rank in their next collective. Measured here
without chaoslight: 1 fork-started epoch in about 650 of a 2-rank gloo fit with two
workers hangs on CPython 3.11.7.

The evidence is the worker's own stack (``_runtime/_loader_workers``): the hung rank's
dump names each worker of the loader it waits on, and one whose innermost frame is the
``os.fork()`` of multiprocessing's fork start is stuck in the fork, with the
interpreter's name and version beside it.
"""

from __future__ import annotations

import re

from chaoslight._report import HUNG, Outcome
from chaoslight._runtime._loader_workers import STUCK_IN_FORK
from chaoslight._verdict._known_frames import collective_ends
from chaoslight._verdict._known_issue import NOTHING, Claimed
from chaoslight._verdict._preemption import Delivery

_INTERPRETER = re.compile(
    re.escape(STUCK_IN_FORK) + r" \((?P<name>\w+) (?P<version>[0-9][^)\s]*)\)"
)


def interpreter_in_stacks(outcome: Outcome) -> tuple[str, str] | None:
    """``("cpython", "3.11.7")``: the interpreter a hung rank's stuck worker ran, as its
    block in the rank's stacks names it."""
    for result in outcome.ranks:
        found = _INTERPRETER.search(result.stacks or "")
        if found is not None:
            return found["name"].lower(), found["version"]
    return None


def worker_stuck_in_fork(outcome: Outcome, taken: list[Delivery]) -> Claimed:
    """A hung rank waits on a DataLoader worker stuck in os.fork(): its hang, and its
    peers' ends in a collective (they wait for it), are the interpreter's."""
    stuck = frozenset(
        r.rank for r in outcome.ranks if r.status == HUNG and STUCK_IN_FORK in (r.stacks or "")
    )
    return Claimed(stuck | collective_ends(outcome)) if stuck else NOTHING
