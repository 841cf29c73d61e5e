"""One settings object for a search: ``fuzz``, ``check``, ``Campaign``, the command line and
the pytest plugin build the same ``chaoslight.Settings``, checked once, defaults written once."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

import chaoslight
import chaoslight._search as search
from chaoslight import InvalidArgument, Schedule, Settings
from chaoslight._cli import build_parser
from chaoslight._cli._arguments import search_settings
from chaoslight._pytest_plugin import settings_of
from chaoslight._search import DEFAULT_CHECKS, Campaign, Result
from chaoslight._search._inprocess import run_in_process

TARGET = "my_project.train:main"  # a module target: its form is checked, nothing imported


class RecordsSettings:
    """Stands in for ``Campaign`` in ``fuzz``: keeps the settings it was given, runs nothing."""

    received: list[Settings] = []

    def __init__(self, run: Any, strategy: Any, settings: Settings, **options: Any) -> None:
        RecordsSettings.received.append(settings)

    def execute(self) -> Result:
        return Result("clean")


class AWorld:
    """A World already started, of two ranks, that no test here runs anything on."""

    size = 2


@pytest.fixture
def received(monkeypatch: pytest.MonkeyPatch) -> list[Settings]:
    monkeypatch.setattr(search, "Campaign", RecordsSettings)
    RecordsSettings.received = []
    return RecordsSettings.received


SOME: dict[str, Any] = {
    "max_examples": 7,
    "seed": 3,
    "faults": ["oom", "delay"],
    "strict": True,
    "replays": 1,
}


def test_fuzz_with_a_settings_object_and_with_keywords_runs_the_same_campaign(
    received: list[Settings],
) -> None:
    """fuzz(target, Settings(...)) and fuzz(target, **the same keywords) give the campaign
    equal settings, and a keyword's list is kept as the tuple the object holds."""
    chaoslight.fuzz(TARGET, Settings(**SOME), world=AWorld())  # type: ignore[arg-type]
    chaoslight.fuzz(TARGET, world=AWorld(), **SOME)  # type: ignore[arg-type]
    assert len(received) == 2 and received[0] == received[1]
    assert received[0].faults == ("oom", "delay") and received[0].max_examples == 7


def test_a_keyword_beside_a_settings_object_wins(received: list[Settings]) -> None:
    """fuzz(target, settings, seed=4): the keyword overrides that setting, the rest stay."""
    chaoslight.fuzz(TARGET, Settings(**SOME), seed=4, world=AWorld())  # type: ignore[arg-type]
    assert received[0] == Settings(**{**SOME, "seed": 4})


def test_a_keyword_that_is_no_setting_is_refused_naming_the_closest() -> None:
    """A misspelt keyword (or the removed ``mode``) is one TypeError before anything runs."""
    with pytest.raises(TypeError, match=r"fuzz\(\) .* 'max_example'; did you mean 'max_examples'"):
        chaoslight.fuzz(TARGET, max_example=3)
    with pytest.raises(TypeError, match="'mode'; settings: world_size, checks"):
        chaoslight.fuzz(TARGET, mode="survive")


BAD = [
    ({"world_size": 0}, "world_size=0 must be at least 1"),
    ({"world_size": 65}, "world_size=65 must be at most 64 (each rank is a process"),
    ({"max_examples": 0}, "max_examples=0 must be at least 1"),
    ({"replays": 1000}, "replays=1000 must be at most 100"),
    ({"timeout": 0}, "timeout=0 must be a positive number of seconds"),
    ({"timeout": 1e9}, "timeout=1e+09 must be at most 86400 (a day"),
    ({"max_time": float("nan")}, "max_time=nan must be a positive number of seconds"),
    ({"strict": "yes"}, "strict='yes' must be True or False"),
    ({"seed": 1.5}, "seed=1.5 must be an int"),
    ({"shard": (2, 2)}, "shard=2/2 must be i/N with 0 <= i < N"),
    ({"database": "ftp://x"}, "database='ftp://x' is not a database"),
    ({"faults": ["oomm"]}, "faults: 'oomm' is not a fault kind; did you mean 'oom'?"),
    ({"sites": ["lightning.fwd"]}, "sites: 'lightning.fwd' is not a known site"),
    ({"checks": ["replicas"]}, "check 'replicas' is not a check"),
    ({"checks": "no-hang"}, "checks='no-hang' must be a list of checks"),
]


@pytest.mark.parametrize(("bad", "message"), BAD, ids=lambda v: str(v)[:40])
def test_a_bad_value_is_refused_when_the_settings_are_built_as_fuzz_refuses_it(
    bad: dict[str, Any], message: str
) -> None:
    """Settings(...) refuses a bad value with the one line that fuzz's keyword, Campaign's
    keyword and Settings.replace give."""
    with pytest.raises(InvalidArgument) as built:
        Settings(**bad)
    with pytest.raises(InvalidArgument) as through_fuzz:
        chaoslight.fuzz(TARGET, **bad)
    with pytest.raises(InvalidArgument) as through_campaign:
        Campaign(lambda s, fresh: None, None, **bad)  # type: ignore[arg-type,return-value]
    with pytest.raises(InvalidArgument) as replaced:
        Settings().replace(**bad)
    assert message in str(built.value) and "\n" not in str(built.value)
    assert {str(e.value) for e in (through_fuzz, through_campaign, replaced)} == {str(built.value)}


def test_settings_are_frozen_and_replace_makes_a_checked_copy() -> None:
    """A Settings cannot be changed after it is built; replace() returns a new one."""
    settings = Settings(seed=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.seed = 2  # type: ignore[misc]
    assert settings.replace(seed=2).seed == 2 and settings.seed == 1


def test_a_campaign_takes_its_settings_and_runs_by_them() -> None:
    """Campaign(run, strategy, Settings(max_examples=3, replays=0)) runs the two baseline
    runs and three examples of a passing target, and keeps the settings it was given."""
    settings = Settings(max_examples=3, replays=0, seed=1)
    calls: list[Schedule] = []

    def run(schedule: Schedule, fresh: bool) -> Any:
        calls.append(schedule)
        outcome = run_in_process(lambda: None, schedule)
        return search.judge(outcome), outcome

    strategy = chaoslight.strategies.schedules(faults=["delay"], max_faults=1)
    campaign = Campaign(run, strategy, settings)
    result = campaign.execute()
    assert campaign.settings is settings
    assert result.status == "clean" and result.examples == len(calls) == 2 + 3


def cli_settings(*options: str) -> Settings:
    return search_settings(build_parser().parse_args(["fuzz", TARGET, *options]))


def test_the_command_line_with_no_option_builds_the_default_settings() -> None:
    """chaoslight fuzz's and check's defaults are Settings' own (the timeout included)."""
    assert cli_settings() == Settings()
    check = build_parser().parse_args(["check", TARGET])
    assert search_settings(check) == Settings()
    assert check.timeout == Settings().timeout == search.DEFAULT_TIMEOUT_S == 20.0


def test_the_command_line_and_the_plugin_build_the_same_settings(
    pytester: pytest.Pytester,
) -> None:
    """chaoslight fuzz --world-size 3 --timeout 7 --strict and pytest --chaos-world-size 3
    --chaos-timeout 7 --chaos-strict make equal Settings; with no option, the defaults."""
    plugin = pytester.parseconfig(
        "--chaos-world-size", "3", "--chaos-timeout", "7", "--chaos-strict"
    )
    from_cli = cli_settings("--world-size", "3", "--timeout", "7", "--strict")
    assert settings_of(plugin) == from_cli == Settings(world_size=3, timeout=7.0, strict=True)
    assert settings_of(pytester.parseconfig()) == cli_settings() == Settings()


def test_the_plugin_marker_sets_the_world_size() -> None:
    """@pytest.mark.chaos_world(size=4) makes the plugin's settings four ranks."""

    class Options:
        def getoption(self, name: str) -> Any:
            return {"--chaos-world-size": 2, "--chaos-timeout": 20.0}.get(name, False)

    marker = pytest.mark.chaos_world(size=4).mark
    assert settings_of(Options(), marker).world_size == 4  # type: ignore[arg-type]


def test_the_command_line_options_reach_the_settings() -> None:
    """Each search option of chaoslight fuzz lands in its setting (lists and the shard
    parsed from their text)."""
    settings = cli_settings(
        "--faults", "oom,delay", "--sites", "lightning.forward", "--steps", "2",
        "--max-faults", "1", "--max-examples", "9", "--max-time", "5", "--seed", "8",
        "--replays", "0", "--shard", "1/3", "--no-check", "no-hang",
    )  # fmt: skip
    assert settings == Settings(
        faults=("oom", "delay"), sites=("lightning.forward",), steps=2, max_faults=1,
        max_examples=9, max_time=5.0, seed=8, replays=0, shard=(1, 3),
        checks=tuple(name for name in DEFAULT_CHECKS if name != "no-hang"),
    )  # fmt: skip


class RecordsWorld:
    """Stands in for ``World`` in ``check``: records its size and the run's timeout."""

    seen: list[tuple[int, float, list[str]]] = []

    def __init__(self, size: int) -> None:
        self.size = size

    def __enter__(self) -> RecordsWorld:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def run(self, target: str, schedule: Schedule, **options: Any) -> Any:
        names = [check.name for check in options["checks"]]
        RecordsWorld.seen.append((self.size, options["timeout"], names))
        return run_in_process(lambda: None, schedule)


def test_baseline_takes_settings_or_keywords_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """baseline(target, Settings(world_size=3, timeout=7)) and baseline(target,
    world_size=3, timeout=7) start the same World and run with the same timeout and checks."""
    monkeypatch.setattr(search, "World", RecordsWorld)
    RecordsWorld.seen = []
    chaoslight.baseline(TARGET, Settings(world_size=3, timeout=7, checks=["no-hang"]))
    chaoslight.baseline(TARGET, world_size=3, timeout=7, checks=["no-hang"])
    assert RecordsWorld.seen[0] == RecordsWorld.seen[1]
    assert RecordsWorld.seen[0][:2] == (3, 7.0) and "no-hang" in RecordsWorld.seen[0][2]


def test_the_search_page_describes_every_setting() -> None:
    """docs/explanation/search.md has a row for each field of Settings, none for another."""
    page = (Path(__file__).resolve().parent.parent / "docs/explanation/search.md").read_text()
    rows = set(re.findall(r"^\| `(\w+)` \|", page, flags=re.M))
    assert rows == {field.name for field in dataclasses.fields(Settings)}
