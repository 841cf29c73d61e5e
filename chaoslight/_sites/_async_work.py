"""The wait on an asynchronous collective: ``work = dist.all_reduce(t, async_op=True)``,
later ``work.wait()``.

``Work.wait`` is torch's C++ method: a rank blocked in it has no Python frame of
torch.distributed's own, only the program's line that called it, which reads like a wait
of the program's own (a flag polled, a queue read). Nothing is injected here. The wrapper
exists so that the frame a blocked rank's stack ends in is this module's, which
``_verdict/_stalls.DISTRIBUTED_FRAMES`` counts as a wait in torch.distributed: one the
process group's timeout bounds, as every correct program's wait for a frozen peer is.
"""

from __future__ import annotations

from typing import Any

from chaoslight._sites._core import Call, PatchPoint

# What a stack's frame in this module looks like: the path ``_stalls`` matches.
ASYNC_WAIT_FRAME = "chaoslight/_sites/_async_work.py"


def _async_wait(wrapped: Call, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    __tracebackhide__ = True
    return wrapped(*args, **kwargs)


ASYNC_WORK_POINTS: tuple[PatchPoint, ...] = (
    PatchPoint(
        "torch:work.wait",
        ("torch.distributed.distributed_c10d:Work",),
        "wait",
        _async_wait,
        always=True,
    ),
)
