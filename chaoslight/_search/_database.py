"""Where campaigns share what they found: a directory, or a Redis server.

``--database DIR`` keeps each campaign (target, world size, checks) in its own
sub-directory; ``--database redis://host:port/db`` keeps it under its own key prefix on a
Redis server (Hypothesis's ``RedisExampleDatabase``; ``pip install 'chaoslight[redis]'``),
so workers on many machines share one database. Besides Hypothesis's examples, each
campaign keeps the schedules it reported, which the next campaign with the same key replays
first: Hypothesis does not read its database when a seed is given.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

from chaoslight._schedule import ChaosError, InvalidArgument, Schedule

KNOWN_FAILURES = b"chaoslight-reported-failures"


def open_database(location: str | None, key: str) -> ExampleDatabase | None:
    """This campaign's part of the shared database at ``location`` (None: no database)."""
    if not location:
        return None
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    if location.startswith("redis://"):
        return _redis(location, digest)
    return DirectoryBasedExampleDatabase(str(Path(location) / digest))


def _redis(url: str, digest: str) -> ExampleDatabase:
    try:  # an optional extra: only a campaign that asks for Redis imports it
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase
    except ImportError:
        raise InvalidArgument(
            f"database={url!r} needs the redis package: pip install 'chaoslight[redis]'"
        ) from None
    client = redis.Redis.from_url(url)
    try:
        client.ping()
    except redis.exceptions.RedisError as exc:
        raise InvalidArgument(f"database={url!r}: cannot reach the Redis server ({exc})") from None
    return RedisExampleDatabase(client, key_prefix=f"chaoslight:{digest}:".encode())


def known_failures(database: ExampleDatabase | None) -> list[Schedule]:
    """The schedules earlier campaigns with this key reported, oldest first is not kept."""
    found = []
    for value in database.fetch(KNOWN_FAILURES) if database is not None else ():
        try:
            found.append(Schedule.from_json(value.decode()))
        except (ChaosError, UnicodeDecodeError):
            continue  # written by another chaoslight version
    return found


def remember(database: ExampleDatabase | None, schedule: Schedule) -> None:
    if database is not None:
        database.save(KNOWN_FAILURES, schedule.to_json(indent=None).encode())
