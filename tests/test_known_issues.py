"""Known framework issues, matched by their signature and nothing wider: the ones that need
no signal are recognised from the hung ranks' stacks, with the version of the Lightning
those stacks run; the SIGTERM ones only when a rank waits in Lightning's own SIGTERM
broadcast and nothing but preemptions fired (``chaoslight/_search/_known.py``). A program's
own preemption bug on a Lightning with a SIGTERM issue stays the program's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import lightning
import pytest

import chaoslight
from chaoslight import Event, Outcome, Preempt, Schedule, World, fuzz, judge
from chaoslight._report._outcome import overall, settle
from chaoslight._report._records import ExceptionInfo, RankResult
from chaoslight._runtime import FIRED, NOTE
from chaoslight._search._campaign import FOUND
from chaoslight._search._known import match_known
from chaoslight._search._oracle import FAILED_CLEANLY

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "examples" / "known_issues" / "on_exception_checkpoint.py"
OWN_BUG = ROOT / "examples" / "known_issues" / "preemption_own_bug.py"
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


# -- the SIGTERM issues of Lightning 2.5.2-2.6.x: the signature, nothing wider -------------
SITE = "lightning.training_step"
PREEMPT_BOTH = f"preempt@{SITE} step=3"


def preempted(rank: int, step: int = 3, fault: str = PREEMPT_BOTH) -> list[Event]:
    """Lightning's handler took a SIGTERM on ``rank`` at ``step``, which it then ended at."""
    handler = f"lightning (lightning {lightning.__version__})"
    detail = f"SIGTERM delivered to rank {rank} at step {step}; handled by {handler}"
    return [
        Event(FIRED, SITE, rank, step, 1.0, 1.0, fault, 1),
        Event(NOTE, SITE, rank, step, 1.1, 1.1, fault, 0, detail),
        Event(NOTE, SITE, rank, step, 2.0, 2.0, "", 0, f"last training step {step}"),
    ]


def blocked(rank: int, *frames: tuple[str, str]) -> RankResult:
    """A hung rank whose main thread waits in a collective called from ``frames``."""
    site, _ = lightning_site()
    wait = [(f"{site}/torch/distributed/distributed_c10d.py", "barrier")]
    lines = "".join(f'  File "{p}", line 1 in {f}\n' for p, f in [*wait, *frames])
    return RankResult(rank, "hung", stacks=f"Thread 0x1 (most recent call first):\n{lines}")


def stopped_by_lightning(rank: int) -> RankResult:
    site, _ = lightning_site()
    frame = f'  File "{site}/lightning/pytorch/loops/fit_loop.py", line 503, in on_advance_start\n'
    tb = f"Traceback (most recent call last):\n{frame}SIGTERMException"
    return RankResult(rank, "failed", ExceptionInfo("SIGTERMException", "", tb), ended_s=1.0)


def judged(ranks: list[RankResult], events: list[Event]) -> object:
    settled = settle(ranks)
    schedule = Schedule.parse(PREEMPT_BOTH)
    return judge(Outcome(overall(settled), settled, events, 1.0, schedule, "t.py:f", 5.0))


def test_a_programs_own_barrier_after_lightnings_handler_is_the_programs() -> None:
    """Lightning's handler took the SIGTERM on both ranks and both stopped at step 3; rank 0
    then waits in a barrier its own on_exception called: a failure, not a known issue."""
    site, _ = lightning_site()
    own = [
        (f"{site}/lightning/pytorch/strategies/ddp.py", "barrier"),
        (f"{site}/lightning/pytorch/trainer/trainer.py", "save_checkpoint"),
        ("/home/me/project/callbacks.py", "on_exception"),
    ]
    verdict = judged([blocked(0, *own), stopped_by_lightning(1)], preempted(0) + preempted(1))
    assert verdict.failed and verdict.known is None, verdict.reason  # type: ignore[attr-defined]


def test_a_rank_in_lightnings_sigterm_broadcast_against_another_collective_is_known() -> None:
    """A rank waits in the per-batch SIGTERM broadcast (or the handler's) while its peer
    waits in another collective: Lightning's issue, whichever broadcast it is."""
    site, _ = lightning_site()
    loop = f"{site}/lightning/pytorch/loops/training_epoch_loop.py"
    handler = f"{site}/lightning/pytorch/trainer/connectors/signal_connector.py"
    elsewhere = blocked(0, (f"{site}/lightning/pytorch/strategies/ddp.py", "barrier"))
    for frame in ((loop, "_broadcast_sigterm_tensor"), (handler, "_sigterm_notifier_fn")):
        verdict = judged([elsewhere, blocked(1, frame)], preempted(1))
        assert verdict.known is not None and verdict.known[0].key == "lightning-sigterm-broadcast"  # type: ignore[attr-defined]


@pytest.mark.slow
def test_a_programs_own_preemption_bug_on_lightning_26_fails_the_search(world: World) -> None:
    """SIGTERM to every rank of a job whose on_exception saves from rank 0 only: the run is
    the program's failure, and fuzz --faults preempt ends FAILED (exit 1), not clean; its
    fixed twin stops cleanly under the same notice."""
    schedule = Schedule([Preempt(site=SITE, step=0)])
    outcome = world.run(f"{OWN_BUG}:train_buggy", schedule, timeout=4)
    verdict = judge(outcome)
    assert verdict.failed and verdict.known is None, outcome.report()
    fixed = world.run(f"{OWN_BUG}:train_fixed", schedule, timeout=4)
    assert not judge(fixed).failed, fixed.report()
    result, failure = fuzz(
        f"{OWN_BUG}:train_buggy",
        faults=["preempt"],
        max_examples=3,
        timeout=4,
        seed=0,
        replays=0,
        world=world,
    )
    assert result.status == FOUND and failure is not None and result.verdict is not None
    assert result.verdict.known is None, result.verdict.reason
