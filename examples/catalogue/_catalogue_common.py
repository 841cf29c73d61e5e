"""What the catalogue programs share: the corpus's quiet trainer and seeded data, reused.

The World imports a target file with its own folder on ``sys.path``, so the corpus's
helpers (``examples/corpus/_corpus_common.py``) are reachable only once that folder is on
it too. It is *appended*: nothing of this folder is shadowed. The name is not
``_common``: ``examples/planted/_common.py`` would shadow it in a worker that ran a
planted example first.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

CORPUS = str(Path(__file__).resolve().parent.parent / "corpus")
if CORPUS not in sys.path:
    sys.path.append(CORPUS)

from _corpus_common import (  # noqa: E402  (needs the corpus folder on sys.path)
    FEATURES,
    Regressor,
    dataset,
    pl,
    rank_and_world,
    trainer,
    world_size,
    write_atomically,
)

__all__ = [
    "FEATURES",
    "Regressor",
    "dataset",
    "pl",
    "rank_and_world",
    "seeded",
    "trainer",
    "world_size",
    "write_atomically",
]


def seeded(**options: Any) -> Any:
    """``trainer(**options)`` after ``seed_everything(0)``: every catalogue run starts the same."""
    pl.seed_everything(0, verbose=False)
    return trainer(**options)
