"""An example chaos test suite to copy: Hypothesis draws schedules, a World runs them.

    python -m pytest examples/test_chaos_example.py --chaos-max-examples 10

On a failure the report shows the minimal schedule, the failure and a replay command.
"""

from __future__ import annotations

from chaoslight.strategies import schedules
from hypothesis import HealthCheck, given, settings

from chaoslight.checks import ReplicasInSync

TARGET = "examples/ddp_train.py:train"


# chaos_world is safe to share between generated examples: the World is session-wide and
# the fixture only remembers the last schedule run, for the failure report.
@settings(
    max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(schedule=schedules(world_size=2, steps=4, mode="survive", max_faults=2))
def test_training_survives_benign_faults(chaos_world, schedule):  # type: ignore[no-untyped-def]
    """Stragglers and reordered reductions never make the example fail or desync."""
    outcome = chaos_world.run(TARGET, schedule, timeout=20, checks=[ReplicasInSync(atol=1e-3)])
    assert outcome.passed, outcome.report()
