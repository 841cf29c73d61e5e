"""World targets for tests/test_freeze_abort.py: plain collectives on the World's group."""

from __future__ import annotations


def reduce_once() -> float:
    """One all-reduce of a one: the world size."""
    import torch
    import torch.distributed as dist

    value = torch.ones(1)
    dist.all_reduce(value)
    return float(value)


def reduce_catching_errors() -> str:
    """One all-reduce whose error every rank catches: each rank returns."""
    try:
        reduce_once()
    except RuntimeError as error:
        return f"caught {type(error).__name__}"
    return "reduced"


def reduce_async() -> float:
    """One asynchronous all-reduce, waited on as torch documents: ``work.wait()``."""
    import torch
    import torch.distributed as dist

    value = torch.ones(1)
    work = dist.all_reduce(value, async_op=True)
    work.wait()
    return float(value)
