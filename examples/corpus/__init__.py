"""A corpus of small, correct multi-rank Lightning programs, each with a buggy twin.

Every program ``examples/corpus/<name>.py`` defines ``train()`` (correct) and
``train_buggy()`` (the same program with one bug). ``CORPUS`` lists them with what
reveals each bug: a schedule (often empty: the bug shows with no fault) and the checks
beyond the default ones (``DEFAULT_CHECKS``) that notice it. See README.md.

    from examples.corpus import CORPUS
    for entry in CORPUS:
        with chaoslight.World(size=entry.world_size) as world:
            world.run(entry.target("train"), "", checks=entry.build_checks())
            world.run(entry.target("train_buggy"), entry.schedule, checks=entry.build_checks())

Importing this package needs neither torch nor Lightning. ``restart-after-crash`` is a
check defined here (``_restart.py``), not a chaoslight built-in: a World that runs it must
be created with the repository root on ``sys.path`` (its workers unpickle the check).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

# What every run of the corpus is judged by: the checks ``chaoslight fuzz`` uses when
# given none (names of chaoslight's built-in checks; importing chaoslight needs no torch).
from chaoslight._search import DEFAULT_CHECKS

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Entry:
    """One program of the corpus and what reveals its buggy twin.

    ``schedule``: the schedule (text form) under which ``train_buggy`` fails; ``""`` when
    it fails with no fault. ``checks``: checks beyond ``DEFAULT_CHECKS`` that both
    versions are judged by (the correct one must pass them too). ``needs_check``: the
    buggy twin passes without those checks (it is silent), so a search with no
    ``--check`` cannot find it.
    """

    name: str
    schedule: str = ""
    world_size: int = 2
    checks: tuple[str, ...] = ()
    needs_check: bool = False
    pattern: str = ""

    @property
    def path(self) -> Path:
        return HERE / f"{self.name}.py"

    def target(self, function: str = "train") -> str:
        """The World/CLI target, by absolute path: ``.../oom_skip.py:train``."""
        return f"{self.path}:{function}"

    def check_names(self) -> tuple[str, ...]:
        return DEFAULT_CHECKS + self.checks

    def build_checks(self) -> list[Any]:
        """Fresh check objects for one run: the defaults, then this entry's own."""
        from chaoslight.checks import check_by_name

        from ._restart import RestartAfterCrash

        built: list[Any] = []
        for name in self.check_names():
            if name == RestartAfterCrash.name:
                built.append(RestartAfterCrash(site="torch.save", rank=0, nth=2))
            else:
                built.append(check_by_name(name))
        return built


CORPUS: tuple[Entry, ...] = (
    Entry(
        "oom_skip",
        "oom@lightning.forward rank=1 step=1",
        pattern="OOM recovered by a skip all ranks agree on (all-reduce MAX)",
    ),
    Entry(
        "iterable_shards",
        "",
        needs_check=True,
        pattern="IterableDataset sharded by rank",
    ),
    Entry(
        "atomic_checkpoint",
        "delay@lightning.on_train_epoch_end rank=0 step=3 seconds=0.5",
        pattern="rank 0 writes a side file atomically, then a barrier; all ranks read it",
    ),
    Entry(
        "callback_state",
        "",
        checks=("resume-equivalence",),
        needs_check=True,
        pattern="a stateful callback (LR by step count) saved in the checkpoint",
    ),
    Entry(
        "metrics_sync",
        "",
        pattern="a synced torchmetrics value decides on every rank",
    ),
    Entry(
        "manual_opt",
        "",
        pattern="manual optimization with accumulation; outliers masked in the loss",
    ),
    Entry(
        "two_fits",
        "",
        needs_check=True,
        pattern="pretrain then fine-tune: two fits, state handed over on every rank",
    ),
    Entry(
        "resume_last",
        "",
        checks=("restart-after-crash",),
        needs_check=True,
        pattern='resume with ModelCheckpoint(save_last=True) and ckpt_path="last"',
    ),
    Entry(
        "uneven_batches",
        "",
        pattern="dataset size not divisible by world x batch; DistributedSampler pads",
    ),
    Entry(
        "val_every_n",
        "",
        pattern="val_check_interval=n, validation_step logs with sync_dist=True",
    ),
    Entry(
        "three_rank_reduce",
        "",
        world_size=3,
        pattern="a skip decided from gathered floats summed in one fixed order",
    ),
)

BY_NAME = {entry.name: entry for entry in CORPUS}
