"""Built-in checks (``chaoslight.checks``): oracles that turn silent misbehaviour into failures.

    from chaoslight.checks import ReplicasInSync, ErrorsSurface
    with chaoslight.World(size=2) as world:
        outcome = world.run("train.py:main", schedule, checks=[ReplicasInSync(), ErrorsSurface()])

Each check works in one process (``inject(schedule, checks=[...])``) and across ranks;
names are stable for ``--check NAME``. See ``docs/explanation/checks.md``.
"""

from chaoslight._checks import *  # noqa: F403  (the public face of the private package)
from chaoslight._checks import __all__ as _checks_all
from chaoslight._checks._base import observer_class

__all__ = [*_checks_all, "observer_class"]
