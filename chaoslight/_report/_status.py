"""The statuses of an example and of a rank, most severe first: ``crashed`` (a rank's
process died), ``hung`` (a watchdog fired, or a rank stopped answering), ``failed`` (a rank
raised), ``passed``. A rank whose only error is a torch.distributed one raised because
another rank failed, hung or died is ``released``: it was let go, it is not the cause."""

from __future__ import annotations

from chaoslight._schedule import Vocabulary


class Status(Vocabulary):
    """How an example, or one rank of it, ended. A ``str``: it equals, hashes, prints and
    serialises as its value (``"hung"``), so files and messages read as before."""

    PASSED = "passed"
    FAILED = "failed"
    HUNG = "hung"
    CRASHED = "crashed"
    RELEASED = "released"  # a rank only: let go by a peer's failure, not the cause


PASSED, FAILED, HUNG, CRASHED, RELEASED = (
    Status.PASSED,
    Status.FAILED,
    Status.HUNG,
    Status.CRASHED,
    Status.RELEASED,
)
STATUSES = (PASSED, FAILED, HUNG, CRASHED)  # an example's
RANK_STATUSES = (PASSED, FAILED, RELEASED, HUNG, CRASHED)  # a rank's
