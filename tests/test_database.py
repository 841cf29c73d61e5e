"""Campaigns share what they found through one database: a directory, or a real Redis
server on localhost (skipped, with the reason, where none can be started)."""

from __future__ import annotations

import importlib.util
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from chaoslight import InvalidArgument, Schedule, Verdict
from chaoslight._search import Campaign, Result
from chaoslight._search._campaign import FOUND
from chaoslight._search._database import check_database, is_url, open_database, redact
from chaoslight.strategies import schedules

STRATEGY = schedules(world_size=2, steps=4)


def crash_on_rank_1_step_3(schedule: Schedule, fresh: bool = False) -> tuple[Verdict, None]:
    bad = any(f.kind == "crash" and f.rank == 1 and f.step == 3 for f in schedule)
    return Verdict(bad, "boom" if bad else "", "crashed" if bad else "passed"), None


def crash_on_rank_1(schedule: Schedule, fresh: bool = False) -> tuple[Verdict, None]:
    bad = any(f.kind == "crash" and f.rank == 1 for f in schedule)
    return Verdict(bad, "boom" if bad else "", "crashed" if bad else "passed"), None


def two_campaigns(database: str) -> tuple[object, object]:
    def campaign(seed: int) -> object:
        return Campaign(
            crash_on_rank_1_step_3, STRATEGY, max_examples=2000, seed=seed,
            database=database, key="target|2|checks", replays=1,
        ).execute()  # fmt: skip

    return campaign(1), campaign(2)


def test_a_directory_database_hands_the_first_failure_to_the_second_campaign(
    tmp_path: Path,
) -> None:
    """The second campaign replays the first one's reported failure before searching."""
    first, second = two_campaigns(str(tmp_path / "db"))
    assert first.schedule is not None and second.schedule == first.schedule  # type: ignore[attr-defined]
    assert second.examples < first.examples  # type: ignore[attr-defined]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def redis_server(folder: Path, port: int, *options: str) -> Iterator[subprocess.Popen[bytes]]:
    """A throwaway redis-server on ``port`` of localhost, stopped after."""
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(folder), *options],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as client:
                if client.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield server
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A throwaway redis-server on a free localhost port, stopped after the test."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (Debian package redis-server)")
    if importlib.util.find_spec("redis") is None:
        pytest.skip("the redis package is not installed (pip install 'chaoslight[redis]')")
    port = free_port()
    with redis_server(tmp_path, port):
        yield f"redis://127.0.0.1:{port}/0"


def campaign_on(
    database: str, folder: Path, runner: Any = crash_on_rank_1
) -> tuple[Result, list[str]]:
    """A campaign on ``database`` whose result is written to ``folder/failure.json`` as the
    CLI writes its failure file; with the warnings it gave."""
    warnings: list[str] = []

    def write(result: Result) -> None:
        assert result.schedule is not None
        (folder / "failure.json").write_text(result.schedule.to_json())

    found = Campaign(
        runner, STRATEGY, max_examples=2000, seed=1, database=database, key="k", replays=1,
        on_warning=warnings.append, on_result=write,
    ).execute()  # fmt: skip
    return found, warnings


@pytest.mark.slow  # seconds of real runs: the fast loop stays under a minute
def test_a_redis_database_hands_the_first_failure_to_the_second_campaign(
    redis_url: str,
) -> None:
    """Workers on many machines share one Redis server: the second replays the first's find."""
    first, second = two_campaigns(redis_url)
    assert first.schedule is not None and second.schedule == first.schedule  # type: ignore[attr-defined]
    assert second.examples < first.examples  # type: ignore[attr-defined]


def test_a_redis_that_refuses_the_password_is_a_warning_without_it(tmp_path: Path) -> None:
    """A server that answers but refuses the password: one warning naming the server, never
    the password, and the campaign still reports its failure."""
    if shutil.which("redis-server") is None or importlib.util.find_spec("redis") is None:
        pytest.skip("needs redis-server and the redis package")
    port = free_port()
    with redis_server(tmp_path, port, "--requirepass", "right-one"):
        found, warnings = campaign_on(f"redis://:wrong-one@127.0.0.1:{port}/0", tmp_path)
    assert found.status == FOUND and (tmp_path / "failure.json").exists()
    assert len(warnings) == 1 and f"redis://:***@127.0.0.1:{port}/0" in warnings[0]
    assert "wrong-one" not in warnings[0] and "right-one" not in warnings[0]


def test_a_redis_that_goes_away_mid_campaign_costs_one_warning_not_the_result(
    tmp_path: Path,
) -> None:
    """The server stops while the search is saving its examples: one warning, and the
    failure is still minimised, reported and written."""
    if shutil.which("redis-server") is None or importlib.util.find_spec("redis") is None:
        pytest.skip("needs redis-server and the redis package")
    port = free_port()
    with redis_server(tmp_path, port) as server:

        def stops_the_server(schedule: Schedule, fresh: bool = False) -> tuple[Verdict, None]:
            verdict, outcome = crash_on_rank_1(schedule, fresh)
            if verdict.failed and server.poll() is None:
                server.terminate()
                server.wait(timeout=10)
            return verdict, outcome

        found, warnings = campaign_on(
            f"redis://:secret@127.0.0.1:{port}/0", tmp_path, stops_the_server
        )
    assert found.status == FOUND and (tmp_path / "failure.json").exists()
    assert len(warnings) == 1 and "secret" not in warnings[0], warnings


def test_an_unreachable_redis_is_one_warning_and_the_failure_is_still_written(
    tmp_path: Path,
) -> None:
    """Nobody answers at the URL: one warning naming it without its password, and the
    campaign searches on and hands its failure over (the CLI writes its file there)."""
    found, warnings = campaign_on("redis://:secret@127.0.0.1:1/0", tmp_path)
    assert found.status == FOUND and found.schedule is not None
    assert Schedule.from_json((tmp_path / "failure.json").read_text()) == found.schedule
    assert len(warnings) == 1, warnings
    assert "redis://:***@127.0.0.1:1/0" in warnings[0] and "secret" not in warnings[0]


def test_from_python_a_database_failure_is_one_runtime_warning() -> None:
    """A campaign run from Python says it with a RuntimeWarning, once, without the password."""
    with pytest.warns(RuntimeWarning) as caught:
        found = Campaign(
            crash_on_rank_1, STRATEGY, max_examples=2000, seed=1, replays=1,
            database="redis://:secret@127.0.0.1:1/0",
        ).execute()  # fmt: skip
    assert found.status == FOUND
    assert len(caught) == 1 and "secret" not in str(caught[0].message)


@pytest.mark.parametrize(
    "url", ["rediss://:secret@127.0.0.1:1/0", "unix:///tmp/chaoslight-no-such.sock"]
)
def test_rediss_and_unix_urls_are_databases_not_folders(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TLS or a socket URL goes to redis (here: nobody there, one warning), never becomes
    a folder named after it in the working directory."""
    monkeypatch.chdir(tmp_path)
    warnings: list[str] = []
    assert is_url(url)
    assert open_database(url, "key", warnings.append) is None
    assert len(warnings) == 1 and redact(url) in warnings[0] and "secret" not in warnings[0]
    assert list(tmp_path.iterdir()) == []


def test_a_url_that_is_not_a_database_is_one_line() -> None:
    """Any other scheme is a usage error naming the URL (without its password) and the fix."""
    with pytest.raises(InvalidArgument, match="rediss://") as error:
        check_database("database", "http://user:secret@host/db")
    assert "secret" not in str(error.value) and "\n" not in str(error.value)
    assert check_database("database", "relative/folder") == "relative/folder"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:secret@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://user:secret@h/0", "redis://user:***@h/0"),
        ("rediss://h:6380/0?password=secret&db=1", "rediss://h:6380/0?password=***&db=1"),
        ("unix://:secret@/run/redis.sock?db=2", "unix://:***@/run/redis.sock?db=2"),
        ("redis://user@h/0", "redis://user@h/0"),
        ("/a/folder:secret@x", "/a/folder:secret@x"),
    ],
)
def test_a_url_is_printed_without_its_password(url: str, shown: str) -> None:
    """One helper redacts every URL chaoslight prints; a folder is printed as it is."""
    assert redact(url) == shown
