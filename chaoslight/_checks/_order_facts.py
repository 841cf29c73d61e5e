"""What a loader's pipeline says of its order (``data-order``'s facts): its
DistributedSamplers' state, the components of the program's own that promise a reshuffle,
what Lightning replaced, and the indices a DistributedSampler in a given state draws (its
own arithmetic, so a judge recomputes any rank's share)."""

from __future__ import annotations

from typing import Any


def pipeline_facts(loader: Any) -> dict[str, Any]:
    """How a train loader draws: its DistributedSamplers' state, the program's own
    components that promise a reshuffle in ``set_epoch``, and what Lightning replaced."""
    from torch.utils.data import IterableDataset
    from torch.utils.data.distributed import DistributedSampler

    dataset = getattr(loader, "dataset", None)
    roots: list[Any] = [dataset] if isinstance(dataset, IterableDataset) else []
    roots += [getattr(loader, "batch_sampler", None), getattr(loader, "sampler", None)]
    samplers, promises, replaced = [], [], None
    for part in components(roots):
        if isinstance(part, DistributedSampler):
            samplers.append(distributed_facts(part))
            inner = getattr(getattr(part, "dataset", None), "_sampler", None)
            if inner is not None:  # Lightning's DistributedSamplerWrapper around it
                replaced = f"{type(inner).__name__} (in Lightning's {type(part).__name__})"
        elif callable(getattr(part, "set_epoch", None)) and getattr(part, "shuffle", None) is True:
            promises.append(type(part).__name__)
    return {"samplers": samplers, "promises": promises, "replaced": replaced}


def guarded_facts(loader: Any) -> dict[str, Any]:
    """``pipeline_facts``, or nothing to judge where a sampler of the program's own does
    not answer as torch's do (the check must never break the program's fit)."""
    try:
        return pipeline_facts(loader)
    except (AttributeError, TypeError, ValueError, NotImplementedError):
        return {"samplers": [], "promises": [], "replaced": None}


def components(roots: list[Any], depth: int = 4) -> list[Any]:
    """The samplers (and data sets) in a loader's pipeline: each root, then the samplers
    it holds in its attributes (a batch sampler's sampler, a wrapper's wrapped one)."""
    from torch.utils.data import Sampler

    found: dict[int, Any] = {}
    layer = [root for root in roots if root is not None]
    for _ in range(depth):
        following = []
        for part in layer:
            if id(part) in found:
                continue
            found[id(part)] = part
            inner = getattr(getattr(part, "dataset", None), "_sampler", None)
            values = [*getattr(part, "__dict__", {}).values(), inner]
            following += [v for v in values if isinstance(v, Sampler) and id(v) not in found]
        layer = following
    return list(found.values())


# DistributedSampler and Lightning's wrapper (whose positions are DistributedSampler's):
# a subclass of the program's own may draw otherwise, and is not recomputed.
KNOWN_SAMPLER_MODULES = (
    "torch.utils.data.distributed",
    "lightning.fabric.utilities.distributed",
    "lightning_fabric.utilities.distributed",
)


def distributed_facts(sampler: Any) -> dict[str, Any]:
    """What decides a DistributedSampler's indices this epoch; for Lightning's wrapper,
    also a fingerprint of the order the program's own sampler gave this epoch (``asked``:
    the wrapper draws positions in the list it made of it)."""
    inner = getattr(sampler, "dataset", None)
    return {
        "class": type(sampler).__name__,
        "known": type(sampler).__module__ in KNOWN_SAMPLER_MODULES,
        "wraps": hasattr(inner, "_sampler"),
        "asked": order_fingerprint(getattr(inner, "_sampler_list", None)),
        "length": len(sampler.dataset),
        "shuffle": bool(sampler.shuffle),
        "seed": int(sampler.seed),
        "epoch": int(sampler.epoch),
        "drop_last": bool(sampler.drop_last),
        "replicas": int(sampler.num_replicas),
        "rank": int(sampler.rank),
    }


def order_fingerprint(order: Any) -> int | None:
    """One 64-bit fingerprint of a list of sample indices, or None (no list, or items that
    do not hash)."""
    if not isinstance(order, list):
        return None
    try:
        return hash(tuple(order)) & 0xFFFFFFFFFFFFFFFF
    except TypeError:
        return None


def distributed_indices(facts: dict[str, Any]) -> list[int]:
    """The indices a DistributedSampler in this state draws (its own arithmetic,
    ``torch.utils.data.distributed.DistributedSampler.__iter__``)."""
    import math

    import torch

    length, replicas = int(facts["length"]), int(facts["replicas"])
    if facts["shuffle"]:
        generator = torch.Generator().manual_seed(int(facts["seed"]) + int(facts["epoch"]))
        indices = torch.randperm(length, generator=generator).tolist()
    else:
        indices = list(range(length))
    if facts["drop_last"] and length % replicas:
        total = math.ceil((length - replicas) / replicas) * replicas
        indices = indices[:total]
    else:
        total = math.ceil(length / replicas) * replicas
        padding = total - len(indices)
        if indices and padding:
            indices += (indices * math.ceil(padding / len(indices)))[:padding]
    return indices[int(facts["rank"]) : total : replicas]


def replacement_facts(original: Any, prepared: Any) -> dict[str, Any] | None:
    """What the program's loader asked for and what the loader Lightning made of it
    gives: the batch size, the sampler that orders the samples (its kind: torch's
    ``random`` or ``sequential``, a ``distributed`` one, or the program's ``own``), and
    whether the made loader draws from the program's sampler (the same one, or Lightning's
    wrapper around it) or from a DistributedSampler over the whole data set. None where
    Lightning kept the loader, or where a loader does not answer as torch's does."""
    if prepared is original:
        return None
    try:
        asked, made = index_sampler(original), index_sampler(prepared)
        wraps = getattr(getattr(made, "dataset", None), "_sampler", None)
        return {
            "asked_batch": batch_size_of(original),
            "asked_sampler": type(asked).__name__,
            "asked_kind": sampler_kind(asked),
            "asked_batch_sampler": type(original.batch_sampler).__name__,
            "asked_batches": len(original),
            "made_batch": batch_size_of(prepared),
            "made_sampler": type(made).__name__,
            "made_kind": sampler_kind(made),
            "made_shuffle": bool(getattr(made, "shuffle", False)),
            "made_keeps": made is asked or wraps is asked,
            "made_batches": len(prepared),
        }
    except (AttributeError, TypeError, ValueError, NotImplementedError):
        return None


def index_sampler(loader: Any) -> Any:
    """The sampler that orders a loader's samples: its batch sampler's where the program
    gave one (``batch_sampler=``, when torch leaves ``batch_size`` None), else its own."""
    if loader.batch_size is None and loader.batch_sampler is not None:
        inner = getattr(loader.batch_sampler, "sampler", None)
        # Lightning's index-tracking wrapper (predict) holds the batch sampler it wraps.
        inner = getattr(getattr(loader.batch_sampler, "_batch_sampler", None), "sampler", inner)
        return inner
    return loader.sampler


def batch_size_of(loader: Any) -> int | None:
    """The size of a loader's batches: its own, or its batch sampler's (None: unknown)."""
    if loader.batch_size is not None:
        return int(loader.batch_size)
    batch_sampler = loader.batch_sampler
    batch_sampler = getattr(batch_sampler, "_batch_sampler", batch_sampler)
    size = getattr(batch_sampler, "batch_size", None)
    return int(size) if isinstance(size, int) else None


def sampler_kind(sampler: Any) -> str:
    """``distributed``, ``random``, ``sequential`` (torch's, and their subclasses, which
    Lightning treats as torch's), or ``own``: a sampler whose order is the program's."""
    from torch.utils.data import RandomSampler, SequentialSampler
    from torch.utils.data.distributed import DistributedSampler

    if isinstance(sampler, DistributedSampler):
        return "distributed"
    if isinstance(sampler, RandomSampler):
        return "random"
    if isinstance(sampler, SequentialSampler):
        return "sequential"
    return "own"
