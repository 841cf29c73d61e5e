"""The fault-aware oracle on synthetic outcomes: one test per rule of docs/explanation/oracle.md."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from chaoslight import Event, MemoryBudget, Outcome, Schedule, judge
from chaoslight._report._outcome import overall, settle
from chaoslight._report._records import ExceptionInfo, RankResult
from chaoslight._runtime import FIRED, NOTE
from chaoslight._runtime._preempt import STOPPED
from chaoslight._schedule import Severity
from chaoslight._verdict._oracle import (
    ANY_END_RULE,
    BENIGN_RULE,
    FAILED_CLEANLY,
    HANG_RULE,
    INTERNAL_RULE,
    NO_FAULT,
    RECOVERED,
    SWALLOWED,
)
from chaoslight.checks import Violation

BENIGN, HARD, DESYNC = Severity.BENIGN, Severity.HARD, Severity.DESYNC

OOM_TEXT = "CUDA out of memory. Tried to allocate 1.0 GiB. [simulated by chaoslight: oom@x]"
GLOO = "RuntimeError: Connection closed by peer"


def fired(rank: int, fault: str, step: int = 1) -> Event:
    return Event(FIRED, fault.split("@")[1].split()[0], rank, step, 1.0, 1.0, fault, 1)


def passed(rank: int) -> RankResult:
    return RankResult(rank, "passed", ended_s=2.0)


def raised(rank: int, kind: str, message: str, *, when: float = 1.0, tb: str = "") -> RankResult:
    distributed = "Connection closed" in message
    info = ExceptionInfo(kind, message, tb or f"Traceback:\n{kind}: {message}", distributed)
    return RankResult(rank, "failed", info, ended_s=when)


def hung(rank: int) -> RankResult:
    return RankResult(rank, "hung", evidence=f"rank {rank} waits in dist.all_reduce #4")


def outcome(ranks: list[RankResult], events: list[Event] = (), violations: tuple = ()) -> Outcome:  # type: ignore[assignment]
    settled = settle(list(ranks))
    status = overall(settled)
    if violations and status == "passed":
        status = "failed"
    schedule = Schedule.parse("\n".join(e.fault for e in events))
    return Outcome(status, settled, list(events), 1.0, schedule, "t.py:f", 10.0, violations)


def test_fault_classes_follow_what_a_backend_or_cluster_can_do() -> None:
    """Delays and every-rank reorders are benign; OOM/raise/crash hard; per-rank reorders and
    dropped syncs desync."""
    parse = Schedule.parse
    assert parse("delay@lightning.training_step seconds=0.1").faults[0].fault_class() == BENIGN
    assert parse("reorder@dist.all_reduce order=reversed").faults[0].fault_class() == BENIGN
    assert parse("reorder@dist.all_reduce rank=0 order=reversed").faults[0].fault_class() == DESYNC
    assert parse("drop_sync@dist.all_reduce rank=0").faults[0].fault_class() == DESYNC
    assert parse("oom@lightning.forward").faults[0].fault_class() == HARD
    assert parse("crash@lightning.training_step").faults[0].fault_class() == HARD


def test_no_fault_a_failing_run_fails_with_its_own_error_first() -> None:
    """With nothing fired, any failure is the program's: the first failing rank leads."""
    verdict = judge(
        outcome(
            [
                raised(1, "FileNotFoundError", "no x.ckpt", when=1.0),
                raised(0, "RuntimeError", GLOO, when=2.0),
            ]
        )
    )
    assert verdict.failed and verdict.rule == NO_FAULT
    assert verdict.reason.startswith("rank 1 raised: FileNotFoundError: no x.ckpt")
    assert "consequence: rank 0 was released" in verdict.reason


def test_benign_fault_the_run_must_pass_and_checks_hold() -> None:
    """A delay that fired leaves the program bound to pass: a violation is a failure."""
    delay = fired(0, "delay@lightning.training_step rank=0 seconds=0.5")
    assert not judge(outcome([passed(0), passed(1)], [delay])).failed
    broken = Violation("replicas-in-sync", "parameter 'w' differs", rank=1, step=2)
    verdict = judge(outcome([passed(0), passed(1)], [delay], (broken,)))
    assert verdict.failed and verdict.rule == BENIGN_RULE
    assert verdict.reason.startswith("replicas-in-sync: parameter 'w' differs")


def test_hard_fault_failing_cleanly_is_allowed_and_checks_are_not_judged() -> None:
    """An OOM that ends its rank by the OOM, peers released: allowed; a shard check cut short
    by the fault is not judged."""
    oom = fired(1, "oom@lightning.forward rank=1 step=1")
    short = Violation("disjoint-shards", "in epoch 0 rank 1 saw 1 batches, rank 0 saw 2")
    verdict = judge(
        outcome(
            [raised(1, "OutOfMemoryError", OOM_TEXT), raised(0, "RuntimeError", GLOO, when=2.0)],
            [oom],
            (short,),
        )
    )
    assert not verdict.failed and verdict.rule == FAILED_CLEANLY


def test_hard_fault_recovering_consistently_is_allowed_but_checks_must_hold() -> None:
    """Every rank finishing after an OOM is a recovery: fine if replicas agree, a bug if not."""
    oom = fired(1, "oom@lightning.forward rank=1 step=1")
    recovered = judge(outcome([passed(0), passed(1)], [oom]))
    assert not recovered.failed and recovered.rule == RECOVERED
    drift = Violation("replicas-in-sync", "parameter 'w' differs", rank=1, step=3)
    broken = judge(outcome([passed(0), passed(1)], [oom], (drift,)))
    assert broken.failed and broken.rule == RECOVERED


def test_hard_fault_swallowed_then_failing_later_is_a_bug() -> None:
    """The faulted rank ending with another error (not chained to the OOM) swallowed it."""
    oom = fired(0, "oom@lightning.forward rank=0 step=0")
    verdict = judge(
        outcome(
            [raised(0, "RuntimeError", "Skipping the training_step by returning None"),
             raised(1, "RuntimeError", GLOO, when=2.0)],
            [oom],
        )
    )  # fmt: skip
    assert verdict.failed and verdict.rule == SWALLOWED
    assert verdict.reason.startswith("rank 0 swallowed the injected oom@lightning.forward")


def test_hard_fault_swallowed_while_a_peer_fails_is_a_bug_but_a_chained_error_is_not() -> None:
    """Rank 0 passing after its OOM while rank 1 fails is a swallow; an error raised from the
    OOM (chained in the traceback) surfaced it."""
    oom = fired(0, "oom@lightning.forward rank=0 step=0")
    swallowed = judge(outcome([passed(0), raised(1, "AssertionError", "counts differ")], [oom]))
    assert swallowed.failed and swallowed.rule == SWALLOWED
    chained = raised(0, "RuntimeError", "step failed", tb=f"OutOfMemoryError: {OOM_TEXT}\n\n"
                     "The above exception was the direct cause of the following exception:\n"
                     "RuntimeError: step failed")  # fmt: skip
    clean = judge(outcome([chained, raised(1, "RuntimeError", GLOO, when=2.0)], [oom]))
    assert not clean.failed and clean.rule == FAILED_CLEANLY


def test_a_hang_is_never_allowed_whatever_fired() -> None:
    """After a hard fault, and after a desync, a hung rank fails the run."""
    oom = fired(1, "oom@lightning.forward rank=1 step=1")
    after_oom = judge(outcome([raised(1, "OutOfMemoryError", OOM_TEXT), hung(0)], [oom]))
    assert after_oom.failed and after_oom.rule == HANG_RULE
    assert "rank 0 waits in dist.all_reduce #4" in after_oom.reason
    drop = fired(0, "drop_sync@dist.all_reduce rank=0 step=1")
    assert judge(outcome([passed(1), hung(0)], [drop])).failed


def test_a_hung_rank_under_a_desync_is_the_programs_in_the_accounts() -> None:
    """A desync explains any end but a hang: the hung ranks (and no-hang's violation) are
    the program's symptoms in the verdict's accounts, never "explained by" the flip."""
    from chaoslight._verdict._result import By

    flip = fired(0, "flip@fabric.forward rank=0 step=1")
    stuck = Violation("no-hang", "hung: rank 0 waits in dist.all_reduce #4")
    verdict = judge(outcome([hung(0), hung(1)], [flip], (stuck,)))
    assert verdict.failed and verdict.rule == HANG_RULE
    by = {account.symptom.what.split(":")[0]: account.by for account in verdict.accounts}
    assert by == {"rank 0 hung": By.PROGRAM, "rank 1 hung": By.PROGRAM, "no-hang": By.PROGRAM}
    assert not any("any end but a hang" in str(a) for a in verdict.accounts)


def test_desync_fault_only_requires_that_nothing_hangs() -> None:
    """A dropped collective may fail the job and break every check: it only must not hang."""
    drop = fired(0, "drop_sync@dist.all_reduce rank=0 step=1")
    drift = Violation("replicas-in-sync", "parameter 'w' differs", rank=1)
    verdict = judge(
        outcome([passed(0), raised(1, "RuntimeError", "size mismatch")], [drop], (drift,))
    )
    assert not verdict.failed and verdict.rule == HANG_RULE


def test_an_exception_raised_inside_chaoslight_is_an_internal_error() -> None:
    """A traceback whose innermost frame is chaoslight's own is ours unless the runtime
    marked it deliberate, whatever the function is called (charge is no longer special)."""
    import chaoslight._runtime._memory as memory

    frame = f'  File "{memory.__file__}", line 99, in _release\n'
    bad = raised(
        0, "RuntimeError", "Boolean value of Tensor is ambiguous", tb=f"Traceback:\n{frame}"
    )
    verdict = judge(outcome([bad, raised(1, "RuntimeError", GLOO, when=2.0)]))
    assert verdict.failed and verdict.internal and verdict.rule == INTERNAL_RULE
    for function in ("charge", "_renamed_helper"):
        tb = f'Traceback:\n  File "{memory.__file__}", line 59, in {function}\n'
        unmarked = raised(0, "OutOfMemoryError", OOM_TEXT, tb=tb)
        assert judge(outcome([unmarked, passed(1)])).internal
        assert unmarked.exception is not None
        marked = replace(unmarked, exception=replace(unmarked.exception, deliberate=True))
        assert not judge(outcome([marked, passed(1)])).internal


def test_a_traceback_quoted_in_an_errors_message_is_not_where_the_error_was_raised() -> None:
    """torch's distributed checkpoint raises on every rank a CheckpointException whose
    message carries the failing rank's traceback: there the injected OSError, raised in a
    chaoslight frame. The rank's own innermost frame is torch's: no internal error."""
    import chaoslight._runtime._actions as actions

    quoted = (
        "CheckpointException ranks:dict_keys([1])\nTraceback (most recent call last): (RANK 1)\n"
        f'  File "{actions.__file__}", line 80, in fire\n    raise mark(error)\n'
        "OSError: [Errno 28] No space left on device"
    )
    frame = '  File "/torch/distributed/checkpoint/utils.py", line 212, in reduce_scatter\n'
    tb = f"Traceback (most recent call last):\n{frame}    raise result\n"
    tb += f"CheckpointException: {quoted}"
    verdict = judge(outcome([raised(0, "CheckpointException", quoted, tb=tb), passed(1)]))
    assert not verdict.internal, verdict.reason


def test_an_error_of_a_patched_c_function_is_the_functions_not_chaoslights() -> None:
    """A patched C function (``Work.wait``: a gloo timeout) has no frame of its own: the
    innermost frame is the site wrapper's call of it, and the error is not internal; an
    error on any other line of the same wrapper is."""
    import chaoslight._sites._async_work as work

    timeout = "Timed out waiting 31000ms for send operation to complete"
    for line, internal in (
        ("return wrapped(*args, **kwargs)", False),
        ("__tracebackhide__ = True", True),
    ):
        tb = f'Traceback:\n  File "{work.__file__}", line 24, in _async_wait\n    {line}\n'
        verdict = judge(outcome([raised(0, "RuntimeError", timeout, tb=tb), passed(1)]))
        assert verdict.internal is internal, verdict.reason


def test_a_stack_blocked_in_an_async_collectives_wait_is_inside_torch_distributed() -> None:
    from chaoslight._verdict._stalls import inside_distributed

    def stack(innermost: str) -> str:
        return (
            "Thread 0x1 (most recent call first):\n"
            f'  File "{innermost}", line 24 in _async_wait\n'
            '  File "/w/program.py", line 70 in training_step\n'
            '  File "/w/chaoslight/_world/_worker.py", line 303 in call\n'
        )

    assert inside_distributed(stack("/w/chaoslight/_sites/_async_work.py"))
    assert not inside_distributed(stack("/w/program.py"))


def test_a_stack_blocked_in_a_functional_collectives_wait_is_inside_torch_distributed() -> None:
    """FSDP2's full state dict gathers through DTensor's functional collectives: a rank whose
    peer stopped waits in the op ``wait_tensor``, its innermost frames torch's operator
    dispatch (as torch 2.13 printed them, found by a search on a correct FSDP loop). The
    dispatch frames are the op's; the wait is torch.distributed's, bounded by its timeout.
    An op the program itself calls is no such wait."""
    from chaoslight._verdict._known_frames import collective_caller
    from chaoslight._verdict._stalls import inside_distributed

    dispatch = [
        ("/v/torch/_ops.py", "redispatch"),
        ("/v/torch/_library/autograd.py", "forward_no_grad"),
        ("/v/torch/_library/autograd.py", "autograd_impl"),
        ("/v/torch/_ops.py", "__call__"),
    ]
    gather = [
        ("/v/torch/distributed/_functional_collectives.py", "wait_tensor"),
        ("/v/torch/distributed/tensor/_redistribute.py", "redistribute_local_tensor"),
        ("/v/torch/distributed/checkpoint/state_dict.py", "get_model_state_dict"),
    ]
    program = [("/w/plain_fsdp_rank0_save.py", "_train")]

    def stack(frames: list[tuple[str, str]]) -> str:
        lines = [f'  File "{path}", line 1 in {name}' for path, name in frames]
        return "Thread 0x1 (most recent call first):\n" + "\n".join(lines) + "\n"

    assert inside_distributed(stack([*dispatch, *gather, *program]))
    assert not inside_distributed(stack([*dispatch, *program]))
    assert collective_caller([*dispatch, *gather, *program]) == program[0]
    assert collective_caller([*dispatch, *program]) is None


def test_the_deliberate_mark_crosses_the_rank_boundary() -> None:
    """A marked exception's ExceptionInfo says deliberate, and keeps it through the JSON a
    rank sends its parent; an unmarked one does not."""
    from chaoslight._runtime._deliberate import mark
    from chaoslight._world._worker import exception_info

    for exc, expected in ((mark(ValueError("injected")), True), (ValueError("ours"), False)):
        info = exception_info(exc)
        assert info.deliberate is expected
        assert ExceptionInfo.from_dict(json.loads(json.dumps(info.to_dict()))) == info


@pytest.mark.parametrize("fault", ["oom@lightning.forward rank=1 step=9"])
def test_a_fault_that_never_fired_is_named(fault: str) -> None:
    """A scheduled fault with no firing event is listed in the verdict's never_fired."""
    run = outcome([passed(0), passed(1)])
    run = Outcome(run.status, run.ranks, [], 1.0, Schedule.parse(fault), "t", 1.0)
    assert judge(run).never_fired == (fault,)


@pytest.mark.usefixtures("lightning_in_process")
def test_a_never_firing_fault_is_reported_in_process_with_where_its_site_ran() -> None:
    """A fault whose step never comes is named in run.report(), with the last step the run
    trained; a fault at any step whose site never ran, with that."""
    from helpers import fit

    import chaoslight

    with chaoslight.inject("oom@lightning.forward step=99\ndelay@dist.barrier seconds=0") as run:
        fit(max_steps=3)
    report = run.report()
    assert "0 fault firings; 2 faults never fired" in report
    assert "oom@lightning.forward step=99: rank 0 trained up to step 2: step 99 was never" in report
    assert "dist.barrier was never reached on rank 0" in report


def observed(rank: int, step: int) -> Event:
    return Event("observation", "replicas-in-sync", rank, step, 1.0, 1.0, "", 0, "{}")


def test_a_hang_after_a_caught_injected_error_leads_with_the_catch() -> None:
    """Rank 0 caught its OOM and went on; the hang that follows is its consequence."""
    oom = "oom@lightning.forward rank=0 step=0"
    verdict = judge(outcome([hung(0), hung(1)], [fired(0, oom, step=0)]))
    assert verdict.failed and verdict.rule == HANG_RULE
    assert verdict.reason.startswith(f"rank 0 caught the injected {oom} and went on")
    assert "rank 0 waits in dist.all_reduce #4" in verdict.reason
    assert "Usual cause: an error caught on one rank only" in verdict.reason


def test_a_rank_that_returned_while_its_peer_waits_is_named_first() -> None:
    """Rank 1 left after step 3 while rank 0 waits at step 4: the steps and the usual cause
    (different numbers of batches, a rank-local stop) lead."""
    events = [observed(0, 3), observed(0, 4), observed(1, 3)]
    verdict = judge(outcome([hung(0), passed(1)], events))
    assert verdict.reason.startswith(
        "rank 1 returned (its last step 3) while rank 0 (at step 4) still waits for it"
    )
    assert "trainer.should_stop" in verdict.reason


def test_a_hang_in_the_programs_own_collective_says_what_usually_causes_it() -> None:
    """A rank waiting in a collective its own hook issued: a collective run on some ranks."""
    own = RankResult(0, "hung", evidence="rank 0 waits in dist.barrier #8", in_own_collective=True)
    verdict = judge(outcome([own, hung(1)]))
    assert verdict.reason.startswith("rank 0 waits in dist.barrier #8")
    assert "Usual cause: a collective, or a Lightning call that contains one" in verdict.reason
    plain = judge(outcome([hung(0), hung(1)]))
    assert "Usual cause" not in plain.reason


def test_a_size_mismatch_in_a_collective_says_what_usually_causes_it() -> None:
    """gloo aborts a rank whose all_gather received more data than it expected: the verdict
    says that the ranks' tensors differ in shape."""
    words = "[enforce fail at pair.cc:456] op.preamble.length <= op.nbytes. 14 vs 12"
    aborted = RankResult(0, "crashed", signal=6, output=f"what(): {words}", ended_s=1.0)
    verdict = judge(outcome([aborted, raised(1, "RuntimeError", GLOO, when=1.5)]))
    assert verdict.failed and verdict.rule == NO_FAULT
    assert "Usual cause: a collective whose tensors differ in shape or dtype" in verdict.reason


def test_a_hang_inside_lightnings_exception_handling_is_not_called_a_catch() -> None:
    """Rank 0 hung in an on_exception hook's collective while its OOM was in flight: the
    report says it hung while handling the error, not that it caught it."""
    oom = "oom@lightning.training_step rank=0 step=0"
    stacks = '  File "x/on_exception_collective.py", line 68 in on_exception\n'
    handling = RankResult(0, "hung", evidence="rank 0 waits in dist.all_reduce #8", stacks=stacks)
    verdict = judge(outcome([handling, hung(1)], [fired(0, oom, step=0)]))
    assert verdict.reason.startswith(f"rank 0 hung while handling the injected {oom}")
    assert "caught" not in verdict.reason


# -- faults that cannot fail are not blamed (one test per combination of classes) ---------

PREEMPT = "preempt@lightning.training_step step=0"
SMALL_ALLOCATION = "allocate@lightning.on_train_start rank=0 nbytes=1024"
INJECTED = "injected by chaoslight"  # a raise fault's default message


def delivered(rank: int, fault: str = PREEMPT, step: int = 0) -> list[Event]:
    """A preemption that fired on ``rank`` and whose SIGTERM the program's handler took."""
    note = f"SIGTERM delivered to rank {rank} at step {step}; handled by train.py:on_sigterm"
    return [
        fired(rank, fault, step),
        Event(NOTE, "signal", rank, step, 1.1, 1.1, fault, 0, note),
        Event(NOTE, "engine", rank, step, 1.2, 1.2, "", 0, f"{STOPPED} {step}"),
    ]


def exited(rank: int, code: int) -> RankResult:
    """A rank that ended by ``sys.exit(code)``."""
    return raised(rank, "SystemExit", str(code))


def with_budget(run: Outcome, limit: int = 2**30) -> Outcome:
    return replace(run, schedule=replace(run.schedule, memory_budget=MemoryBudget(limit)))


def test_an_allocation_that_cannot_fail_is_not_blamed_for_a_stop_on_preemption() -> None:
    """No budget, 1 KiB, plus a preemption every rank stops on by exiting 143: the allocation
    could not fail, so nothing was swallowed (held-out correct program, issue 20)."""
    events = [fired(0, SMALL_ALLOCATION, 0), *delivered(0), *delivered(1)]
    verdict = judge(outcome([exited(0, 143), exited(1, 143)], events))
    assert not verdict.failed, verdict.reason
    assert Schedule.parse(SMALL_ALLOCATION).faults[0].fault_class() == BENIGN


def test_a_rank_that_stops_by_its_preemption_swallowed_none_of_its_other_hard_faults() -> None:
    """Under a budget the allocation is hard; the rank that ended by the preemption that also
    struck it stopped by one of its faults: failed cleanly, not swallowed."""
    events = [fired(0, SMALL_ALLOCATION, 0), *delivered(0), *delivered(1)]
    verdict = judge(with_budget(outcome([exited(0, 143), exited(1, 143)], events)))
    assert not verdict.failed, verdict.reason
    assert verdict.rule == FAILED_CLEANLY


def test_a_rank_ended_by_its_injected_error_with_a_preemption_beside_it_failed_cleanly() -> None:
    """A raised error and a preemption on one rank: ending by the error is ending by a fault."""
    error = "raise@lightning.training_step rank=0 step=0 exception=ValueError"
    events = [fired(0, error, 0), *delivered(0)]
    ranks = [raised(0, "ValueError", INJECTED), raised(1, "RuntimeError", GLOO, when=2.0)]
    verdict = judge(outcome(ranks, events))
    assert not verdict.failed, verdict.reason


def test_an_error_swallowed_on_a_rank_the_preemption_never_reached_is_still_a_bug() -> None:
    """The preemption struck rank 1 only; rank 0 swallowed its injected error and failed
    later by its own: the other rank's notice explains nothing on rank 0."""
    error = "raise@lightning.training_step rank=0 step=0 exception=ValueError"
    events = [fired(0, error, 0), *delivered(1, "preempt@lightning.training_step rank=1 step=0")]
    ranks = [raised(0, "KeyError", "'loss'"), exited(1, 143)]
    verdict = judge(outcome(ranks, events))
    assert verdict.failed
    assert verdict.rule == SWALLOWED
    assert "rank 0 swallowed the injected raise@" in verdict.reason


def test_an_allocation_under_a_budget_that_went_over_is_a_hard_fault_it_may_end_by() -> None:
    """The budget's OOM surfaced on rank 0 and its peer was released: failed cleanly."""
    events = [fired(0, SMALL_ALLOCATION, 0)]
    ranks = [raised(0, "OutOfMemoryError", OOM_TEXT), raised(1, "RuntimeError", GLOO, when=2.0)]
    verdict = judge(with_budget(outcome(ranks, events), limit=512))
    assert not verdict.failed, verdict.reason
    assert verdict.rule == FAILED_CLEANLY


def test_a_large_allocation_without_a_budget_is_hard_and_a_real_oom_surfaces_it() -> None:
    """1 GiB held with no budget can run a real device out: ending by a real OOM is ending
    by that fault; swallowing it and failing otherwise is a bug."""
    big = "allocate@lightning.on_train_start rank=0 nbytes=1073741824"
    assert Schedule.parse(big).faults[0].fault_class() == HARD
    real = "CUDA out of memory. Tried to allocate 2.0 GiB"
    cleanly = [raised(0, "OutOfMemoryError", real), raised(1, "RuntimeError", GLOO, when=2.0)]
    assert not judge(outcome(cleanly, [fired(0, big, 0)])).failed
    swallowed = [raised(0, "KeyError", "'loss'"), raised(1, "RuntimeError", GLOO, when=2.0)]
    assert judge(outcome(swallowed, [fired(0, big, 0)])).rule == SWALLOWED


def test_a_small_allocation_without_a_budget_is_judged_as_benign_the_run_must_pass() -> None:
    """Nothing can fail by it: a rank that fails is the program's failure, as with a delay."""
    ranks = [raised(0, "KeyError", "'loss'"), raised(1, "RuntimeError", GLOO, when=2.0)]
    verdict = judge(outcome(ranks, [fired(0, SMALL_ALLOCATION, 0)]))
    assert verdict.failed
    assert verdict.rule == BENIGN_RULE


def test_a_guarantee_that_holds_however_a_run_ends_fails_a_run_that_failed_cleanly() -> None:
    """A violation marked any_end (a job that reports success must have finished) fails the
    run even where the hard fault let it fail cleanly; a plain violation there does not."""
    error = "raise@lightning.training_step rank=0 step=0 exception=ValueError"
    ranks = [raised(0, "ValueError", INJECTED), raised(1, "RuntimeError", GLOO, when=2.0)]
    plain = Violation("exit-status", "stopped early")
    binding = Violation("exit-status", "reports success but stopped at step 1 of 8", any_end=True)
    events = [fired(0, error, 0)]
    assert not judge(outcome(ranks, events, (plain,))).failed
    verdict = judge(outcome(ranks, events, (binding,)))
    assert verdict.failed
    assert verdict.rule == ANY_END_RULE
    assert "reports success but stopped at step 1 of 8" in verdict.reason


def test_a_peer_released_by_an_error_before_its_preemption_acted_swallowed_nothing() -> None:
    """Rank 0 ends by its injected error; rank 1, preempted, is released by gloo before its
    handler's stop comes: a consequence of rank 0's end, not a swallowed notice."""
    error = "raise@lightning.training_step rank=0 step=0 exception=ValueError"
    events = [fired(0, error, 0), *delivered(1, PREEMPT.replace("step=0", "rank=1 step=0"))]
    ranks = [raised(0, "ValueError", INJECTED), raised(1, "RuntimeError", GLOO, when=2.0)]
    verdict = judge(outcome(ranks, events))
    assert not verdict.failed, verdict.reason
    own = [raised(0, "ValueError", INJECTED), raised(1, "RuntimeError", "bad shape", when=2.0)]
    assert judge(outcome(own, events)).failed  # its own error after the notice: swallowed


def test_a_sigterm_that_outlived_its_handler_is_judged_as_the_default_action() -> None:
    """The program's handler was installed when the SIGTERM was sent, but the rank died of
    SIGTERM itself: ``fit`` had ended and put back the default action before it arrived
    (on pytorch-lightning 2.5.1, a group preemption 0.3 s after ``on_train_start`` of a
    short fit). The rank stopped as the scheduler asks; its peer exited 143 on its own
    notice: a correct program, judged by the crash rule, not a preemption it mishandled."""
    dead = RankResult(0, "crashed", signal=15, evidence="rank 0 died of SIGTERM", ended_s=1.0)
    events = [*delivered(0), *delivered(1)]
    verdict = judge(outcome([dead, exited(1, 143)], events))
    assert not verdict.failed, verdict.reason
    assert verdict.rule == FAILED_CLEANLY  # the crash rule: every rank ended, in time


def test_the_caller_of_a_collective_is_found_under_the_async_wait_wrapper() -> None:
    """torch's own collectives wait in ``Work.wait``, under chaoslight's marking wrapper:
    a rank blocked in Lightning's SIGTERM broadcast is still seen blocked in a collective
    issued by ``_sigterm_notifier_fn`` (the known issue's signature reads it)."""
    from chaoslight._verdict._known_frames import collective_caller

    wrapper = ("/w/chaoslight/_sites/_async_work.py", "_async_wait")
    torch_frames = [
        ("/v/torch/distributed/distributed_c10d.py", "broadcast"),
        ("/v/torch/distributed/c10d_logger.py", "wrapper"),
    ]
    caller = ("/v/lightning/pytorch/trainer/connectors/signal_connector.py", "_sigterm_notifier_fn")
    assert collective_caller([wrapper, *torch_frames, caller]) == caller
    assert collective_caller([*torch_frames, caller]) == caller
    user = ("/w/program.py", "training_step")
    assert collective_caller([user, caller]) is None  # not waiting in a collective
