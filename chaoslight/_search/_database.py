"""Where campaigns share what they found: a directory, or a Redis server.

``--database DIR`` keeps each campaign (target, world size, checks) in its own
sub-directory; ``--database redis://host:port/db`` (or ``rediss://`` for TLS, or
``unix:///path/to/redis.sock``) keeps it under its own key prefix on a Redis server
(Hypothesis's ``RedisExampleDatabase``; ``pip install 'chaoslight[redis]'``), so workers on
many machines share one database. Besides Hypothesis's examples, each campaign keeps the
schedules it reported, which the next campaign with the same key replays first: Hypothesis
does not read its database when a seed is given.

The database only helps: a server that is down, slow, refuses the password, or a folder
that cannot be written is **one warning**, after which the campaign goes on without it (a
found failure is still written to its failure file). Passwords never leave this module:
every message names the database by ``redact(location)``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

from chaoslight._runtime._resolve import check_allocation_memory, exception_classes
from chaoslight._schedule import ChaosError, InvalidArgument, Schedule
from chaoslight._search._reach import Reach

KNOWN_FAILURES = b"chaoslight-reported-failures"
URL_SCHEMES = ("redis", "rediss", "unix")  # what redis-py's from_url reads
CONNECT_TIMEOUT_S = 5.0  # a server that does not answer costs this once, then is left alone
READ_TIMEOUT_S = 10.0
_QUERY_PASSWORD = re.compile(r"(?i)([?&][^=&#]*password=)[^&#]*")
_HIDDEN = r"\1***"

Warn = Callable[[str], None]


def is_url(location: str) -> bool:
    """Whether ``location`` names a Redis server (anything else is a folder)."""
    scheme, separator, _ = location.partition("://")
    return bool(separator) and scheme.lower() in URL_SCHEMES


def check_database(name: str, location: Any) -> str | None:
    """A folder path or a Redis URL; any other ``scheme://`` is a mistake, said in one line."""
    if location is None:
        return None
    if not isinstance(location, str) or not location:
        raise InvalidArgument(f"{name}={location!r} must be a folder or a redis:// URL")
    if "://" in location and not is_url(location):
        raise InvalidArgument(
            f"{name}={redact(location)!r} is not a database: give a folder, or a "
            "redis://host:port/db, rediss://host:port/db or unix:///path/redis.sock URL"
        )
    return location


def redact(location: str) -> str:
    """``location`` with its password (``user:PASSWORD@``, ``?password=``) shown as ``***``:
    the only form of a database URL that may be printed."""
    if "://" not in location:
        return location  # a folder
    scheme, _, rest = location.partition("://")
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    if "@" in authority:
        userinfo, _, host = authority.rpartition("@")
        user, colon, _password = userinfo.partition(":")
        authority = f"{user}:***@{host}" if colon else authority
    return f"{scheme}://{authority}{_QUERY_PASSWORD.sub(_HIDDEN, tail)}"


def _scrub(text: str, location: str) -> str:
    """``text`` (an error's message) without the password of ``location`` in it."""
    text = text.replace(location, redact(location))
    try:
        parts = urlsplit(location)
        secrets = {parts.password or ""}
        secrets |= {
            v for k, vs in parse_qs(parts.query).items() if "password" in k.lower() for v in vs
        }
    except ValueError:
        return text
    for secret in sorted((secrets | {unquote(s) for s in secrets}) - {""}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def open_database(location: str | None, key: str, warn: Warn) -> ExampleDatabase | None:
    """This campaign's part of the shared database at ``location`` (None: no database, or
    one that could not be reached: ``warn`` was told why, once)."""
    if not location:
        return None
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    if not is_url(location):
        return SharedDatabase(
            DirectoryBasedExampleDatabase(str(Path(location) / digest)), location, warn
        )
    return _redis(location, digest, warn)


def _redis(url: str, digest: str, warn: Warn) -> ExampleDatabase | None:
    try:  # an optional extra: only a campaign that asks for Redis imports it
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase
    except ImportError:
        raise InvalidArgument(
            f"database={redact(url)!r} needs the redis package: pip install 'chaoslight[redis]'"
        ) from None
    try:
        client = redis.Redis.from_url(
            url, socket_connect_timeout=CONNECT_TIMEOUT_S, socket_timeout=READ_TIMEOUT_S
        )
    except ValueError as exc:  # a malformed URL: the user's to fix
        raise InvalidArgument(f"database={redact(url)!r}: {_scrub(str(exc), url)}") from None
    shared = SharedDatabase(
        RedisExampleDatabase(client, key_prefix=f"chaoslight:{digest}:".encode()), url, warn
    )
    shared.call("connect", client.ping)  # a server that is not there: one warning, now
    return None if shared.broken else shared


class SharedDatabase(ExampleDatabase):
    """A database whose errors are warnings: the first error (``OSError``, or anything the
    redis package raises) is said once, and the database is left alone from then on, so a
    server that went away costs one timeout, not one per example, and never a result."""

    def __init__(self, inner: ExampleDatabase, location: str, warn: Warn) -> None:
        super().__init__()
        self.inner, self.location, self.warn = inner, location, warn
        self.broken = False

    def __repr__(self) -> str:
        return f"SharedDatabase({redact(self.location)!r})"

    def call(self, action: str, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)``, or None once the database failed (and said so, once)."""
        if self.broken:
            return None
        try:
            return function(*args)
        except _errors() as exc:
            self.broken = True
            reason = _scrub(f"{type(exc).__name__}: {exc}", self.location)
            self.warn(
                f"chaoslight: warning: the database {redact(self.location)} failed to {action} "
                f"({reason}); this campaign goes on without it: what it finds is still "
                "written to its failure file, but not shared"
            )
            return None

    def fetch(self, key: bytes) -> Iterable[bytes]:
        return self.call("read", lambda: list(self.inner.fetch(key))) or []

    def save(self, key: bytes, value: bytes) -> None:
        self.call("write", self.inner.save, key, value)

    def delete(self, key: bytes, value: bytes) -> None:
        self.call("write", self.inner.delete, key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.call("write", self.inner.move, src, dest, value)


def _errors() -> tuple[type[BaseException], ...]:
    """What a database may raise: a folder's OSError, and every error of the redis package
    (refused, timed out, wrong password, a full server); redis only when it is installed."""
    try:
        from redis.exceptions import RedisError
    except ImportError:
        return (OSError,)
    return (OSError, RedisError)


def known_failures(database: ExampleDatabase | None) -> list[Schedule]:
    """The schedules earlier campaigns with this key reported, oldest first is not kept."""
    found = []
    for value in database.fetch(KNOWN_FAILURES) if database is not None else ():
        try:
            schedule = Schedule.from_json(value.decode())
            exception_classes(schedule)  # a database is data: it imports nothing
            check_allocation_memory(schedule, ranks=1)
        except (ChaosError, UnicodeDecodeError):
            continue  # written by another chaoslight version, or asks what no file may
        found.append(schedule)
    return found


def remember(database: ExampleDatabase | None, schedule: Schedule) -> None:
    if database is not None:
        database.save(KNOWN_FAILURES, schedule.to_json(indent=None).encode())


def in_shard(schedule: Schedule, shard: tuple[int, int] | None) -> bool:
    """Whether a stored failure is this worker's to replay: the shard of its first fault's
    (site, step) point, split as the search space is (``Reach.shard``), so the worker whose
    part of the space a failure lies in, and only it, replays it."""
    if shard is None or not schedule.faults:
        return True
    first = schedule.faults[0]
    return bool(Reach(((first.site, first.step),)).shard(*shard).points)
