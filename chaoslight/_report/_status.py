"""The statuses of an example and of a rank, most severe first: ``crashed`` (a rank's
process died), ``hung`` (a watchdog fired, or a rank stopped answering), ``failed`` (a rank
raised), ``passed``. A rank whose only error is a torch.distributed one raised because
another rank failed, hung or died is ``released``: it was let go, it is not the cause."""

from __future__ import annotations

PASSED, FAILED, HUNG, CRASHED, RELEASED = "passed", "failed", "hung", "crashed", "released"
STATUSES = (PASSED, FAILED, HUNG, CRASHED)
RANK_STATUSES = (PASSED, FAILED, RELEASED, HUNG, CRASHED)
