"""The World's side of its workers' message pipes: read what arrived, note who is gone."""

from __future__ import annotations

import selectors
import time

from chaoslight._world._slot import Slot
from chaoslight._world._wire import Ready, Reply

Messages = list[tuple[Slot, Reply | None]]


class Lost(Exception):
    """A worker's pipe closed while the World was waiting for it."""

    def __init__(self, slot: Slot) -> None:
        super().__init__(f"rank {slot.rank}")
        self.slot = slot


def pump(selector: selectors.BaseSelector, deadline: float) -> Messages:
    """Messages that arrive before ``deadline``; ``None`` for a pipe that closed (its slot
    is then marked dead and unregistered). A ``Ready`` marks its slot ready instead."""
    out: Messages = []
    for key, _ in selector.select(max(0.0, deadline - time.monotonic())):
        slot: Slot = key.data
        messages, eof = slot.read()
        for msg in messages:
            if isinstance(msg, Ready):
                slot.ready = True
            else:
                out.append((slot, msg))
        if eof:
            selector.unregister(slot.msgs)
            slot.dead = True
            out.append((slot, None))
    return out
