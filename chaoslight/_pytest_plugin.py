"""The chaoslight pytest plugin (entry point ``pytest11``): fixtures, options, failure reports.

Fixtures:
- ``chaos_world``: a World shared by the whole session (one per size), for
  ``chaos_world.run(target, schedule)``; size from ``--chaos-world-size`` or the
  ``@pytest.mark.chaos_world(size=N)`` marker.
- ``chaos``: in-process injection, ``with chaos(schedule) as run: trainer.fit(...)``.

Options: ``--chaos-world-size``, ``--chaos-timeout`` (default per-example timeout). The
search itself is Hypothesis's: seed it with Hypothesis's own ``--hypothesis-seed`` and
size it with a Hypothesis profile (``--hypothesis-profile``); chaoslight sets neither.

When a test that used a fixture fails, its report gets a ``chaoslight`` section with
the last schedule run (for a Hypothesis test, the example Hypothesis shrank it to) in text
form, the failure, and the replay command; the failure is written to
``.chaoslight/failures/<test>.json`` with the checks' full specs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaoslight._runtime import as_checks, as_schedule, inject
from chaoslight._search._coverage import coverage
from chaoslight._search._failure import Failure, check_specs, replay_command
from chaoslight._world import World

FAILURES_DIR = Path(".chaoslight") / "failures"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaoslight", "chaoslight fault injection")
    group.addoption("--chaos-world-size", type=int, default=2, help="ranks in chaos_world")
    group.addoption(
        "--chaos-timeout",
        type=float,
        default=20.0,
        help="per-example timeout of chaos_world.run, seconds",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos_world(size): the World size this test needs")


class _Recorder:
    """Remembers the last schedule a test ran, and what came of it."""

    def __init__(self) -> None:
        self.schedule: Any = None
        self.outcome: Any = None
        self.target = ""
        self.world_size = 1
        self.timeout = 0.0
        self.checks: tuple[Any, ...] = ()


class RecordingWorld:
    """A session World seen through one test: ``run`` records what it ran."""

    def __init__(self, world: Any, recorder: _Recorder, timeout: float, tried: list[Any]) -> None:
        self.world = world
        self.tried = tried
        self.recorder = recorder
        self.timeout = timeout
        self.size = world.size

    def run(
        self, target: str, schedule: Any = None, *, timeout: float | None = None, checks: Any = ()
    ) -> Any:
        plan = as_schedule(schedule)
        checks = as_checks(checks)
        rec = self.recorder
        rec.schedule, rec.target, rec.world_size = plan, target, self.size
        rec.timeout, rec.checks = timeout or self.timeout, tuple(checks)
        rec.outcome = None
        self.tried.append(plan)
        rec.outcome = self.world.run(target, plan, timeout=rec.timeout, checks=checks)
        return rec.outcome


@pytest.fixture(scope="session")
def _chaos_worlds() -> Iterator[dict[int, Any]]:
    worlds: dict[int, Any] = {}
    yield worlds
    for world in worlds.values():
        world.close()


@pytest.fixture
def chaos_world(request: pytest.FixtureRequest, _chaos_worlds: dict[int, Any]) -> RecordingWorld:
    """A session-wide World of ``--chaos-world-size`` ranks (or the marker's size)."""
    marker = request.node.get_closest_marker("chaos_world")
    size = (
        int(marker.kwargs.get("size", marker.args[0] if marker.args else 2))
        if marker
        else request.config.getoption("--chaos-world-size")
    )
    if size not in _chaos_worlds or _chaos_worlds[size].closed:
        _chaos_worlds[size] = World(size=size)
    recorder = request.node.stash.setdefault(_RECORDER, _Recorder())
    timeout = request.config.getoption("--chaos-timeout")
    tried = request.config.stash.setdefault(_TRIED, [])
    return RecordingWorld(_chaos_worlds[size], recorder, timeout, tried)


@pytest.fixture
def chaos(request: pytest.FixtureRequest) -> Any:
    """In-process injection: ``with chaos(schedule, checks=[...]) as run: ...``."""
    recorder = request.node.stash.setdefault(_RECORDER, _Recorder())
    tried = request.config.stash.setdefault(_TRIED, [])

    def activate(schedule: Any = None, **options: Any) -> Any:
        recorder.schedule = as_schedule(schedule)
        tried.append(recorder.schedule)
        return inject(recorder.schedule, **options)

    return activate


_RECORDER = pytest.StashKey[_Recorder]()
_TRIED = pytest.StashKey[list[Any]]()  # every schedule the fixtures ran this session


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """What the chaos fixtures explored this session: schedules, points, kinds."""
    tried = terminalreporter.config.stash.get(_TRIED, [])
    if tried:
        summary = coverage(None, tried)
        terminalreporter.write_line(
            f"chaoslight: {summary.examples} schedules run by the chaos fixtures; "
            f"faults at {summary.tried} (site, step) points; kinds tried: "
            + (", ".join(f"{k} {n}" for k, n in sorted(summary.kinds.items())) or "none")
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome: Any = yield
    report = outcome.get_result()
    recorder = item.stash.get(_RECORDER, None)
    if report.when != "call" or not report.failed or recorder is None or recorder.schedule is None:
        return
    report.sections.append(("chaoslight", _describe(item, recorder)))


def _describe(item: pytest.Item, recorder: _Recorder) -> str:
    path = FAILURES_DIR / (re.sub(r"[^\w.-]+", "_", item.nodeid).strip("_") + ".json")
    outcome = recorder.outcome
    reason = outcome.summary() if outcome is not None else "the test failed under this schedule"
    failure = Failure(
        recorder.schedule,
        recorder.target,
        recorder.world_size,
        recorder.timeout or 20.0,
        check_specs(recorder.checks),
        reason,
    )
    failure.save(Path(item.config.rootpath) / path)
    shrunk = getattr(getattr(item, "obj", None), "is_hypothesis_test", False)
    lines = [
        "failing schedule, as Hypothesis shrank it:"
        if shrunk
        else "failing schedule (the last one run; not shrunk):"
    ]
    lines += ["  " + line for line in (recorder.schedule.to_text() or "(empty)").splitlines()]
    lines.append(f"failure: {reason}")
    for violation in getattr(outcome, "violations", None) or []:
        lines.append(f"check failed: {violation}")
    lines.append(f"schedule written to {path}")
    if recorder.target:
        lines.append(f"replay: {replay_command(path, failure)}")
    return "\n".join(lines)
