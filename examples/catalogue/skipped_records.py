"""A stream that skips the records it cannot decode: one rank's epoch comes up short.

Failure mode: the training data is a stream of serialised samples (one ``torch.save``d
record each, as webdataset's ``.pth`` decoder and many shard formats store them),
sharded by rank in an ``IterableDataset``. "One corrupt record must not kill the job",
so the decoder catches the error a damaged record raises (``EOFError``,
``pickle.UnpicklingError``) and skips the record, as ``handler=warn_and_continue`` does.
A record is bad on one rank only (that rank's shard, that rank's flaky read), so that
rank's epoch is a sample short; with ``drop_last=True`` it is a batch short, and the
ranks run different numbers of steps in collectives that must pair up: the job hangs at
the end of the epoch (on NCCL, until the watchdog kills it). Reviewing a loader that
skipped broken images, torchtitan's maintainers warned: "It is very likely that some
ranks will be stuck" (pytorch/torchtitan#1172); webdataset#225 discusses the same
uneven-batches hang.

What exposes it: the default search reads the program's own ``except`` clauses around
the sites the baseline reached (here the ``torch.load`` inside ``__iter__``) and raises
what they catch, on one rank: ``raise@torch.load rank=1 exception=EOFError``. The plain
``RuntimeError`` the search raises everywhere else would pass this handler by.

    chaoslight fuzz examples/catalogue/skipped_records.py:train_buggy

The fixed twin keeps every rank's epoch the same length whatever it skips (webdataset's
``with_epoch``): it yields exactly its shard's size, reading on round the shard past a
bad record, and gives up with an error only when too many records fail.
"""

from __future__ import annotations

import io
import itertools
import pickle
from collections.abc import Iterator
from typing import Any

import torch
from _catalogue_common import Regressor, dataset, rank_and_world, seeded
from torch.utils.data import DataLoader, IterableDataset

BATCH = 4
MAX_FAILURES = 8  # the fixed stream's patience before it calls the data broken


def encode(sample: tuple[torch.Tensor, torch.Tensor]) -> bytes:
    buffer = io.BytesIO()
    torch.save(sample, buffer)
    return buffer.getvalue()


def decode(record: bytes) -> Any:
    return torch.load(io.BytesIO(record))


class RecordStream(IterableDataset):
    """This rank's shard of serialised samples, decoded one by one."""

    def __init__(self, fixed_length: bool) -> None:
        data = dataset(32)
        self.records = [encode((data[i][0], data[i][1])) for i in range(len(data))]
        self.fixed_length = fixed_length

    def __iter__(self) -> Iterator[Any]:
        rank, world = rank_and_world()
        shard = self.records[rank::world]
        if not self.fixed_length:
            for record in shard:
                try:
                    yield decode(record)
                except (EOFError, pickle.UnpicklingError):
                    continue  # the bug: this rank's epoch is now a sample short
            return
        yielded = failures = 0
        for record in itertools.cycle(shard):
            if yielded == len(shard):
                return
            try:
                sample = decode(record)
            except (EOFError, pickle.UnpicklingError):
                failures += 1
                if failures > MAX_FAILURES:
                    raise
                continue
            yielded += 1
            yield sample


def _run(fixed_length: bool) -> float:
    fit = seeded(max_epochs=2)
    model = Regressor()
    loader = DataLoader(RecordStream(fixed_length), batch_size=BATCH, drop_last=True)
    fit.fit(model, loader)
    return float(model.layer.weight.sum())


def train_buggy() -> float:
    """Bug: a record that fails to decode is skipped, on its rank alone."""
    return _run(fixed_length=False)


def train_fixed() -> float:
    """Fixed: every rank's epoch keeps its length, whatever it skips."""
    return _run(fixed_length=True)
