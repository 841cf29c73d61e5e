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

from chaoslight._sites._core import Call, Gating, PatchPoint


def in_async_wait(filename: str) -> bool:
    """Whether a frame's file (a live frame's, or one a stack dump or traceback names,
    recorded on any machine) is this module: the wait every torch collective and every
    ``work.wait()`` of the program's ends in. The one test the verdict and the World use."""
    return filename.replace("\\", "/").endswith("chaoslight/_sites/_async_work.py")


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
        gating=Gating.ALWAYS,  # the frame a blocked rank's stack ends in, whatever fires
    ),
)
