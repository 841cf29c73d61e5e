"""The shapes (examples/shapes): every correct program passes once with no fault.

One 2-rank World for the whole module; each shape runs with the empty schedule and the
default checks of ``chaoslight fuzz`` and is judged by the oracle (``chaoslight.judge``).
A shape in ``KNOWN_FALSE_ALARMS`` is a correct program chaoslight still reports: it is
expected to fail, strictly, so the fix that makes it pass also updates the list.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

import chaoslight
from chaoslight._search import DEFAULT_CHECKS

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples.shapes import KNOWN_FALSE_ALARMS, SHAPES, target  # noqa: E402

pytestmark = pytest.mark.slow

TIMEOUT = 30.0


@pytest.fixture
def world(world2: Any) -> Any:
    """The session's 2-rank World, shared by every shape of the module."""
    return world2


def _param(name: str) -> Any:
    if name in KNOWN_FALSE_ALARMS:
        mark = pytest.mark.xfail(strict=True, reason=KNOWN_FALSE_ALARMS[name])
        return pytest.param(name, marks=mark, id=name)
    return pytest.param(name, id=name)


@pytest.mark.parametrize("name", [_param(name) for name in SHAPES])
def test_shape_passes_with_no_fault(world: Any, name: str) -> None:
    """The shape's train() passes on 2 ranks with no fault, every default check holding."""
    outcome = world.run(target(name), "", timeout=TIMEOUT, checks=list(DEFAULT_CHECKS))
    verdict = chaoslight.judge(outcome)
    described = f"{verdict.reason}\n{outcome.report()[-3000:]}"
    assert outcome.status == "passed", described
    assert not verdict.failed, described
