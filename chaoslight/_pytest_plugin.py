"""The chaoslight pytest plugin (entry point ``pytest11``): fixtures, options, failure reports.

Fixtures:
- ``chaos_world``: a World shared by the whole session (one per size), for
  ``chaos_world.run(target, schedule)``; size from ``--chaos-world-size`` or the
  ``@pytest.mark.chaos_world(size=N)`` marker.
- ``chaos``: in-process injection, ``with chaos(schedule) as run: trainer.fit(...)``.

``chaos_world.judge(outcome)`` is the oracle's verdict (``chaoslight.judge``); a failure
Lightning itself causes (a known issue, e.g. its SIGTERM handling) does not fail it but
is listed once in the session summary, unless ``--chaos-strict``.

Options: ``--chaos-world-size``, ``--chaos-timeout`` (default per-example timeout),
``--chaos-strict``: with the marker they make one ``chaoslight.Settings`` (``settings_of``),
with the search's defaults. The
search itself is Hypothesis's: seed it with Hypothesis's own ``--hypothesis-seed`` and
size it with a Hypothesis profile (``--hypothesis-profile``); chaoslight sets neither.

When a test that used a fixture fails, its report gets a ``chaoslight`` section with
the last schedule run (for a Hypothesis test, the example Hypothesis shrank it to) in text
form, the root cause in one line, and the replay command; the failure is written to
``.chaoslight/failures/<test>.json`` with the checks' full specs and, for a World example,
its timeline to ``<test>.html`` (``chaos_world`` traces every run: a lane per rank, every
hook and collective, each rank's traceback). A failing report longer than
``MAX_REPORT_LINES`` (per-rank tracebacks in an assertion message) is cut to its start
and end on the terminal; the whole of it goes to ``<test>.txt``, with ``outcome.report()``.
``--chaos-full-report`` keeps it whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from chaoslight._runtime import as_checks, as_schedule, inject
from chaoslight._search import Settings, judge
from chaoslight._search._coverage import coverage
from chaoslight._search._failure import Failure, check_specs, replay_command
from chaoslight._search._settings import DEFAULT_TIMEOUT_S
from chaoslight._world import World

FAILURES_DIR = Path(".chaoslight") / "failures"
MAX_REPORT_LINES = 60  # a failing test's report beyond this is cut (the file keeps it all)
HEAD_LINES, TAIL_LINES = 26, 12


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaoslight", "chaoslight fault injection")
    group.addoption(
        "--chaos-world-size", type=int, default=Settings.world_size, help="ranks in chaos_world"
    )
    group.addoption(
        "--chaos-timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help="per-example timeout of chaos_world.run, seconds",
    )
    group.addoption(
        "--chaos-full-report",
        action="store_true",
        help="show a failing chaos test's whole report on the terminal (default: one longer "
        f"than {MAX_REPORT_LINES} lines is cut; the whole goes to .chaoslight/failures/)",
    )

    group.addoption(
        "--chaos-strict",
        action="store_true",
        help="a known issue of the framework (e.g. Lightning's SIGTERM handling) fails "
        "chaos_world.judge (default: listed once in the summary, not a failure)",
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

    def __init__(
        self,
        world: Any,
        recorder: _Recorder,
        timeout: float,
        tried: list[Any],
        known: dict[str, Any] | None = None,
    ) -> None:
        self.world = world
        self.known = known  # issue key -> finding; None: --chaos-strict
        self.tried = tried
        self.recorder = recorder
        self.timeout = timeout
        self.size = world.size

    def run(
        self,
        target: str,
        schedule: Any = None,
        *,
        timeout: float | None = None,
        checks: Any = (),
        trace: bool = True,
    ) -> Any:
        """``World.run``, traced by default: a failure's report comes with its timeline
        (the spans cost microseconds per site call; ``trace=False`` skips them)."""
        plan = as_schedule(schedule)
        checks = as_checks(checks)
        rec = self.recorder
        rec.schedule, rec.target, rec.world_size = plan, target, self.size
        rec.timeout, rec.checks = timeout or self.timeout, tuple(checks)
        rec.outcome = None
        self.tried.append(plan)
        rec.outcome = self.world.run(target, plan, timeout=rec.timeout, checks=checks, trace=trace)
        return rec.outcome

    def judge(self, outcome: Any) -> Any:
        """The oracle's verdict; a known framework issue is set aside (listed once in the
        session summary) and does not fail, unless ``--chaos-strict``."""
        verdict = judge(outcome)
        if self.known is not None:
            for finding in verdict.known_findings(outcome.schedule):
                self.known.setdefault(finding.issue.key, finding)
            if verdict.failed and not verdict.is_finding():
                verdict = replace(verdict, failed=False)
        return verdict


@pytest.fixture(scope="session")
def _chaos_worlds() -> Iterator[dict[int, Any]]:
    worlds: dict[int, Any] = {}
    yield worlds
    for world in worlds.values():
        world.close()


def settings_of(config: pytest.Config, marker: pytest.Mark | None = None) -> Settings:
    """The one ``Settings`` of the plugin's options, the ``chaos_world`` marker's size first."""
    size = config.getoption("--chaos-world-size")
    if marker is not None:
        size = int(
            marker.kwargs.get("size", marker.args[0] if marker.args else Settings.world_size)
        )
    return Settings(
        world_size=size,
        timeout=config.getoption("--chaos-timeout"),
        strict=config.getoption("chaos_strict"),
    )


@pytest.fixture
def chaos_world(request: pytest.FixtureRequest, _chaos_worlds: dict[int, Any]) -> RecordingWorld:
    """A session-wide World of ``--chaos-world-size`` ranks (or the marker's size)."""
    settings = settings_of(request.config, request.node.get_closest_marker("chaos_world"))
    size = settings.world_size
    if size not in _chaos_worlds or _chaos_worlds[size].closed:
        _chaos_worlds[size] = World(size=size)
    recorder = request.node.stash.setdefault(_RECORDER, _Recorder())
    tried = request.config.stash.setdefault(_TRIED, [])
    known = None if settings.strict else request.config.stash.setdefault(_KNOWN, {})
    return RecordingWorld(_chaos_worlds[size], recorder, settings.timeout, tried, known)


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
_KNOWN = pytest.StashKey[dict[str, Any]]()  # known framework issues met, once each


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """What the chaos fixtures explored this session: schedules, points, kinds; the known
    framework issues they met, once each."""
    for finding in terminalreporter.config.stash.get(_KNOWN, {}).values():
        for line in finding.report():
            terminalreporter.write_line(f"chaoslight: {line}")
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
    name = re.sub(r"[^\w.-]+", "_", item.nodeid).strip("_")
    root = Path(item.config.rootpath)
    whole = item.config.getoption("chaos_full_report")
    cut = _keep_report(report, recorder, root, name, whole)
    report.sections.append(("chaoslight", _describe(item, recorder, root, name, cut)))


def _file(name: str, suffix: str) -> Path:
    """``.chaoslight/failures/<name><suffix>``, relative to the rootdir, as reports name it."""
    return FAILURES_DIR / f"{name}{suffix}"


def _keep_report(report: Any, recorder: _Recorder, root: Path, name: str, whole: bool) -> bool:
    """Write the test's whole report (and the outcome's, every rank's traceback) to
    ``<name>.txt``; cut the terminal's copy to its start and end when it is long."""
    text = report.longreprtext
    if recorder.outcome is not None:
        text += "\n\n" + recorder.outcome.report()
    kept = root / _file(name, ".txt")
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(text + "\n", encoding="utf-8")
    lines = report.longreprtext.splitlines()
    if whole or len(lines) <= MAX_REPORT_LINES:
        return False
    cut = len(lines) - HEAD_LINES - TAIL_LINES
    note = f"... {cut} lines cut by chaoslight: the whole report is in {_file(name, '.txt')}"
    text = "\n".join([*lines[:HEAD_LINES], note, *lines[-TAIL_LINES:]])
    report.longrepr = _CutReport(text, _first_line(getattr(report.longrepr, "reprcrash", None)))
    return True


def _first_line(reprcrash: Any) -> Any:
    """The crash summary with its message cut to the first line: pytest prints the whole
    message in its short summary when ``CI`` is set, every rank's traceback included."""
    if reprcrash is None or not hasattr(reprcrash, "message"):
        return reprcrash
    first = reprcrash.message.split("\n", 1)[0]
    return replace(reprcrash, message=first)


class _CutReport:
    """A failure's report cut short; ``reprcrash`` keeps pytest's one-line summary."""

    def __init__(self, text: str, reprcrash: Any) -> None:
        self.text, self.reprcrash = text, reprcrash

    def toterminal(self, out: Any) -> None:
        for line in self.text.splitlines():
            out.line(line)

    def __str__(self) -> str:
        return self.text


def _describe(item: pytest.Item, recorder: _Recorder, root: Path, name: str, cut: bool) -> str:
    """The report's chaoslight section: the schedule, the cause, where the files are."""
    path = _file(name, ".json")
    outcome = recorder.outcome
    reason = outcome.summary() if outcome is not None else "the test failed under this schedule"
    failure = Failure(
        recorder.schedule,
        recorder.target,
        recorder.world_size,
        recorder.timeout or DEFAULT_TIMEOUT_S,
        check_specs(recorder.checks),
        reason,
    )
    failure.save(root / path)
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
    if outcome is not None:
        html = _file(name, ".html")
        outcome.to_html(root / html, replay_command=replay_command(path, failure))
        lines.append(f"timeline: {html} (open it in a browser: a lane per rank)")
    what = "the whole report" if cut else "the report"
    lines.append(f"{what}, with every rank's traceback: {_file(name, '.txt')}")
    lines.append(f"schedule written to {path}")
    if recorder.target:
        lines.append(f"replay: {replay_command(path, failure)}")
    return "\n".join(lines)
