"""Running an example in this process (no World): for single-rank searches and tests."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from chaoslight._report import FAILED, PASSED, ExceptionInfo, Outcome, RankResult
from chaoslight._runtime._inject import inject
from chaoslight._schedule._errors import CheckFailed
from chaoslight._schedule._model import Schedule
from chaoslight._verdict._oracle import Verdict, judge


def run_in_process(
    function: Callable[[], Any], schedule: Schedule, checks: Sequence[Any] = ()
) -> Outcome:
    """Call ``function`` under ``schedule`` in this process; the result as a 1-rank Outcome."""
    started = time.monotonic()
    injection = inject(schedule, checks=checks)
    exception: BaseException | None = None
    try:
        with injection:
            function()
    except CheckFailed:
        pass  # the violations are on the run
    except Exception as exc:  # the example's own failure is data here
        exception = exc
    run = injection.run
    if exception is None:
        result = RankResult(0, PASSED)
    else:
        info = ExceptionInfo.of(exception)
        result = RankResult(0, FAILED, info, evidence=f"rank 0 raised: {info}")
    status = FAILED if run.violations or exception is not None else PASSED
    return Outcome(
        status,
        (result,),
        list(run.events),
        time.monotonic() - started,
        schedule,
        getattr(function, "__name__", "function"),
        0.0,
        tuple(run.violations),
    )


def in_process_runner(
    function: Callable[[], Any], checks: Sequence[Any] = ()
) -> Callable[[Schedule, bool], tuple[Verdict, Outcome]]:
    """A Campaign runner that runs ``function`` in this process under each schedule, judged
    by the oracle (``fresh`` has no meaning in one process: every run is alike)."""

    def run(schedule: Schedule, fresh: bool = False) -> tuple[Verdict, Outcome]:
        outcome = run_in_process(function, schedule, checks)
        return judge(outcome), outcome

    return run
