"""An example chaos test suite to copy: Hypothesis draws schedules, a World runs them,
the fault-aware oracle judges each run (docs/explanation/oracle.md).

    python -m pytest examples/test_chaos_example.py

On a failure the report shows the shrunk schedule, the failure and a replay command.
Seed or size the search with Hypothesis's own options (``--hypothesis-seed``, profiles).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

import chaoslight
from chaoslight.strategies import schedules

TARGET = "examples/ddp_train.py:train"


# chaos_world is safe to share between generated examples: the World is session-wide and
# the fixture only remembers the last schedule run, for the failure report.
@settings(
    max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(schedule=schedules(world_size=2, steps=4, max_faults=2))
def test_training_is_robust(chaos_world, schedule):  # type: ignore[no-untyped-def]
    """Whatever fires, the job does what a correct program may: pass, recover or fail cleanly."""
    outcome = chaos_world.run(TARGET, schedule, timeout=20, checks=["replicas-in-sync"])
    verdict = chaoslight.judge(outcome)
    assert not verdict.failed, verdict.reason
