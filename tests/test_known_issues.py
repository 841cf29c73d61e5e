"""Known framework issues that need no signal: recognised from the hung ranks' stacks, with
the version of the Lightning those stacks run (``chaoslight/_search/_known.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import lightning
import pytest

import chaoslight
from chaoslight import Schedule
from chaoslight._search._known import match_known
from chaoslight._search._oracle import FAILED_CLEANLY, judge
from chaoslight._world import World
from chaoslight._world._outcome import Outcome, RankResult, overall, settle

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "examples" / "known_issues" / "on_exception_checkpoint.py"
RAISE = "raise@lightning.training_step rank=1 step=2"


def lightning_site() -> tuple[str, str]:
    """The folder the installed Lightning lives in, and its version."""
    return str(Path(lightning.__file__).parent.parent), lightning.__version__


def stack(path: str) -> str:
    """A faulthandler dump of a rank waiting in save_checkpoint's barrier under ``path``."""
    return (
        "Thread 0x1 (most recent call first):\n"
        '  File "/x/torch/distributed/distributed_c10d.py", line 5356 in barrier\n'
        f'  File "{path}/trainer/trainer.py", line 1465 in save_checkpoint\n'
        f'  File "{path}/callbacks/on_exception_checkpoint.py", line 67 in on_exception\n'
    )


def hang(stacks: str) -> Outcome:
    ranks = settle([RankResult(0, "hung"), RankResult(1, "hung", stacks=stacks)])
    return Outcome(overall(ranks), ranks, [], 1.0, Schedule.parse(RAISE), "t.py:f", 5.0)


def test_a_hang_in_on_exception_checkpoint_is_lightnings_known_issue() -> None:
    """A rank hung in OnExceptionCheckpoint.on_exception matches #20187, with the package
    and version read from the installation the stack runs."""
    site, version = lightning_site()
    found = match_known(hang(stack(f"{site}/lightning/pytorch")))
    assert found is not None
    issue, package, seen = found
    assert (issue.key, package, seen) == ("lightning-on-exception-checkpoint", "lightning", version)
    assert "20187" in issue.reference and "torch.save" in issue.workaround


def test_the_same_frames_in_the_users_own_files_are_the_users() -> None:
    """A callback of the program's own named like Lightning's is not Lightning's issue."""
    assert match_known(hang(stack("/home/me/project/mycallbacks"))) is None
    assert match_known(hang("")) is None


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    with World(size=2) as shared:
        yield shared


@pytest.mark.slow
def test_an_error_on_one_rank_under_on_exception_checkpoint_is_reported_as_known(
    world: World,
) -> None:
    """Under DDP, Lightning's OnExceptionCheckpoint hangs the job when one rank raises: the
    verdict fails and names the known issue; the workaround's twin fails cleanly."""
    checks = [chaoslight.checks.check_by_name("no-hang")]
    outcome = world.run(f"{PROGRAM}:train", RAISE, timeout=10, checks=checks)
    verdict = judge(outcome)
    assert verdict.failed and verdict.known is not None, outcome.report()
    assert verdict.known[0].key == "lightning-on-exception-checkpoint"
    fixed = world.run(f"{PROGRAM}:train_fixed", RAISE, timeout=10, checks=checks)
    assert judge(fixed).rule == FAILED_CLEANLY, fixed.report()
