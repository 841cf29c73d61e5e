"""A batch read twice or lost: what ``repeat_batch`` and ``drop_batch`` do to a fetch.

Shared by every site that fetches a batch (Lightning's fetcher, a DataLoader iterator):
the action wraps the fetch (``read_twice``, ``read_past``), and the site's wrapper
(``repeatable_fetch``) hands a repeated batch to the next fetch of the same iterator.
"""

from __future__ import annotations

import weakref
from typing import Any

from chaoslight._sites._core import Call
from chaoslight._sites._patch import Wrapper

# A batch a repeat left to be read again, by fetcher: that fetcher's next read returns it
# in place of the batch it reads (lost). Weak: a fetcher that is gone takes it along.
_REPEATS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_NONE = object()


def repeat_pending() -> bool:
    """Whether a repeat left a batch for a fetcher's next fetch."""
    return bool(_REPEATS)


def read_twice(call: Call) -> Call:
    """The fetch ``call`` (a fetcher's bound ``__next__``), whose batch is read again by
    the fetcher's next fetch, in place of the one that fetch reads: a stale read."""

    def read(*args: Any, **kwargs: Any) -> Any:
        batch = call(*args, **kwargs)
        fetcher = getattr(call, "__self__", None)
        if fetcher is not None:
            _REPEATS[fetcher] = batch
        return batch

    return read


def read_past(call: Call) -> Call:
    """The fetch ``call``, reading one batch more: the one it should return is lost, and
    the next is returned in its place (at the epoch's end, the epoch ends one early)."""

    def read(*args: Any, **kwargs: Any) -> Any:
        call(*args, **kwargs)  # the lost read
        return call(*args, **kwargs)

    return read


def repeatable_fetch(site: Wrapper) -> Wrapper:
    """``site``'s wrapper of a fetch, which returns the batch a repeat left for this
    fetcher, if any, in place of the one it read (a fetch that ends the epoch drops it:
    nothing to replace)."""

    def fetch(wrapped: Call, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        __tracebackhide__ = True
        repeated = _REPEATS.pop(instance, _NONE) if _REPEATS and instance is not None else _NONE
        read = site(wrapped, instance, args, kwargs)
        return read if repeated is _NONE else _in_place_of(repeated, read)

    return fetch


def _in_place_of(repeated: Any, read: Any) -> Any:
    """The repeated batch where the read one goes. A fetch from Lightning's CombinedLoader
    is ``(batch, batch_idx, dataloader_idx)``: only the batch repeats, the loop's indices
    are the read's (a stale buffer, not a step back)."""
    triples = isinstance(read, tuple) and isinstance(repeated, tuple)
    if triples and len(read) == len(repeated) == 3 and all(type(i) is int for i in read[1:]):
        return (repeated[0], *read[1:])
    return repeated
