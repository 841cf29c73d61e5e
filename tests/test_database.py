"""Campaigns share what they found through one database: a directory, or a real Redis
server on localhost (skipped, with the reason, where none can be started)."""

from __future__ import annotations

import importlib.util
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from chaoslight.strategies import schedules

from chaoslight import InvalidArgument, Schedule
from chaoslight._search import Campaign
from chaoslight._search._database import open_database
from chaoslight._search._oracle import Verdict

STRATEGY = schedules(world_size=2, steps=4)


def crash_on_rank_1_step_3(schedule: Schedule, fresh: bool = False) -> tuple[Verdict, None]:
    bad = any(f.kind == "crash" and f.rank == 1 and f.step == 3 for f in schedule)
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


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A throwaway redis-server on a free localhost port, stopped after the test."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (Debian package redis-server)")
    if importlib.util.find_spec("redis") is None:
        pytest.skip("the redis package is not installed (pip install 'chaoslight[redis]')")
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as client:
                if client.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_a_redis_database_hands_the_first_failure_to_the_second_campaign(
    redis_url: str,
) -> None:
    """Workers on many machines share one Redis server: the second replays the first's find."""
    first, second = two_campaigns(redis_url)
    assert first.schedule is not None and second.schedule == first.schedule  # type: ignore[attr-defined]
    assert second.examples < first.examples  # type: ignore[attr-defined]


def test_an_unreachable_redis_is_one_line(redis_url: str) -> None:
    """A Redis URL nobody answers is a one-line error naming it."""
    dead = f"redis://127.0.0.1:{free_port()}/0"
    with pytest.raises(InvalidArgument, match="cannot reach the Redis server"):
        open_database(dead, "key")
