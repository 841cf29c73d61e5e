"""``RestartAfterCrash``: kill a rank in the middle of a call (a write), restart the job.

``ResumeEquivalence`` crashes every rank at the start of a batch, between writes, so it
cannot see a checkpoint written non-atomically. This check crashes one rank *inside* a
site -- at ``torch.save`` chaoslight lets half of the serialised bytes reach the file
first, as a real crash mid-write does -- and then restarts the job, fault-free, in the
same working directory (as a scheduler restarts a preempted job). The restart must
finish on every rank: a program that resumes from what it finds on disk must never find
a file it cannot read.

    world.run("examples/corpus/resume_last.py:train", "",
              checks=[RestartAfterCrash(site="torch.save", rank=0, nth=2)])

World only (it needs ``judge_reruns``). The class must be importable in the World's
workers (they unpickle it): create the World with the repository root on ``sys.path``.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from chaoslight import Crash, Schedule
from chaoslight.checks import Check, Evidence, Violation


class RestartAfterCrash(Check):
    """A crash of ``rank`` at the ``nth`` call of ``site``, then a restart: it must finish."""

    name = "restart-after-crash"
    cause = "a file written in place (no temporary file and rename) and read back on restart"

    def __init__(self, site: str = "torch.save", rank: int = 0, nth: int = 1) -> None:
        self.site = site
        self.rank = rank
        self.nth = nth

    def judge_reruns(self, evidence: Evidence, rerun: Any, scratch: Path) -> list[Violation]:
        # A fresh directory per judgement: a search judges many runs with one check object,
        # and a restart must not find the files of an earlier example's finished job.
        workdir = Path(tempfile.mkdtemp(prefix=f"restart-{self.nth}-", dir=scratch))
        try:
            return self._crash_and_restart(rerun, workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _crash_and_restart(self, rerun: Any, workdir: Path) -> list[Violation]:
        crash = Crash(site=self.site, rank=self.rank, nth=self.nth)
        crashed = rerun(Schedule([crash]), workdir=workdir)
        # Fired: the crash's event, or (should the killed rank's log be cut) how it ended.
        view = crashed.ranks.get(self.rank)
        fired = any(event.kind == "fired" for event in crashed.events)
        if not fired and (view is None or view.status != "crashed"):
            return [
                Violation(
                    self.name,
                    f"the crash never fired: rank {self.rank} made fewer than {self.nth} "
                    f"calls of {self.site}",
                )
            ]
        restarted = rerun(Schedule(), workdir=workdir)
        for ended in sorted(restarted.ranks.values(), key=lambda v: v.rank):
            if ended.status != "passed":
                what = f"{ended.exception_type}: {ended.exception_message}".strip(": ")
                return [
                    Violation(
                        self.name,
                        f"after rank {self.rank} crashed in call {self.nth} of {self.site}, "
                        f"the restarted job did not finish: rank {ended.rank} {ended.status}"
                        + (f" ({what[:200]})" if what else ""),
                        rank=ended.rank,
                        cause=self.cause,
                    )
                ]
        return []
