"""DDP's gradient-bucket all-reduce, as the site ``dist.gradient_allreduce``.

The gradient all-reduce runs in DDP's C++ reducer and never passes through Python's
``all_reduce``, so while the site is armed a communication hook is registered on the
``DistributedDataParallel`` module as Lightning builds it (``DDPStrategy._setup_model``).
Lightning's own ``ddp_comm_hook`` option registers hooks only on CUDA; this works on CPU.

- DropSync: the rank still takes part in the collective (so no peer hangs) but keeps
  its local gradients: replicas silently diverge.
- ReorderReduction: contributions are gathered and summed in the fault's order; the
  targeted rank divides each by the world size first (pre-multiplied, as NCCL does).
- Delay: a straggler inside the backward pass.
"""

from __future__ import annotations

from typing import Any

from chaoslight._sites._core import STATE, Behaviour, Call, PatchPoint
from chaoslight._sites._reorder import NATURAL, ordered_sum
from chaoslight._sites._versions import LightningPoint

SITE = "dist.gradient_allreduce"


def _average_bucket(bucket: Any) -> Any:
    """What DDP does by default: average the bucket across ranks, asynchronously."""
    import torch.distributed as dist

    tensor = bucket.buffer()
    tensor.div_(dist.get_world_size())
    work = dist.all_reduce(tensor, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


def _done(tensor: Any) -> Any:
    import torch

    future: Any = torch.futures.Future()
    future.set_result(tensor)
    return future


def _keep_local(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    bucket = args[0]
    local = bucket.buffer().clone()
    _average_bucket(bucket).wait()  # take part, so the other ranks are not left waiting
    return _done(local)


def _reordered(wrapped: Call, args: tuple[Any, ...], kwargs: dict[str, Any], order: str) -> Any:
    import torch
    import torch.distributed as dist

    tensor = args[0].buffer()
    if tensor.is_sparse:  # a sparse gradient's bucket: gloo gathers no sparse tensor
        return wrapped(*args, **kwargs)
    world = dist.get_world_size()
    parts = [torch.empty_like(tensor) for _ in range(world)]
    dist.all_gather(parts, tensor)
    if order == NATURAL:
        return _done(ordered_sum(parts, NATURAL) / world)
    return _done(ordered_sum([p / world for p in parts], order))


BEHAVIOUR = Behaviour(skip=_keep_local, reduce=_reordered)


def chaos_comm_hook(state: Any, bucket: Any) -> Any:
    """The DDP communication hook: route each bucket through the engine."""
    __tracebackhide__ = True
    dispatcher = STATE.dispatcher
    if dispatcher is None or SITE not in dispatcher.armed:
        return _average_bucket(bucket)

    def average(bucket: Any) -> Any:
        with dispatcher.internal():  # the bucket's all_reduce is not a dist.all_reduce call
            return _average_bucket(bucket)

    return dispatcher.call(SITE, average, None, (bucket,), {}, BEHAVIOUR)


def _register_on_setup(
    wrapped: Call, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    __tracebackhide__ = True
    model = wrapped(*args, **kwargs)
    dispatcher = STATE.dispatcher
    user_hook = getattr(instance, "_ddp_comm_hook", None)
    if dispatcher is not None and SITE in dispatcher.armed and user_hook is None:
        import torch
        import torch.distributed as dist

        # DDP checks the hook's annotations as objects; ours are strings (PEP 563).
        chaos_comm_hook.__annotations__ = {
            "state": object,
            "bucket": dist.GradBucket,
            "return": torch.futures.Future[torch.Tensor],
        }
        model.register_comm_hook(state=None, hook=chaos_comm_hook)
    return model


DDP_POINTS: tuple[PatchPoint, ...] = (
    LightningPoint(
        "lightning:ddp_comm_hook",
        (
            "lightning.pytorch.strategies.ddp:DDPStrategy",
            "pytorch_lightning.strategies.ddp:DDPStrategy",
        ),
        "_setup_model",
        _register_on_setup,
        sites=frozenset({SITE}),
        subclasses=True,
    ),
)
