"""The damage a fault does to a real file, and undoing it when the run ends.

A Raise, Crash or OOM at ``torch.save`` first writes half of the serialised bytes to the
destination, as a crash in the middle of a write does: the program (and a restart of it)
must see that truncated file, or non-atomic checkpoint code is never caught. The user's
original must survive it. So before the damage its bytes -- or the fact that there was no
file -- go into a *ledger*: a folder with a backup per damaged file and a manifest of JSON
lines (path, backup, the size and sha256 of the damaged bytes, the original's times).
When the run ends, every damaged file that still holds exactly the damaged bytes gets its
original back (or is removed, if there was none); a file the program wrote (or removed)
since keeps what the program did. Several damages of one file undo newest first, so the
file ends as it was before the first.

Who restores: the process itself, when ``inject()`` exits -- unless the process that
started it (a World for its example, ``chaoslight run`` for its job) made the job's
ledger with ``make_ledger`` and named it in ``LEDGER_VARIABLE``. Then the process writes
its backups and manifest there and that parent restores once the job is over: a crash
kills the rank before it could, and a run restarted after the fault must still see the
damage (see ``holding``).

A ledger is read as data, never trusted like code: it is a fresh folder of the job
(``mkdtemp``, mode 0700, this user's), never a fixed name in a folder someone else may
have made; a named folder that is not such a folder is ignored (the process keeps a
private ledger and restores itself); a backup is a plain file name inside the ledger, a
manifest a plain file ``manifest-PID.jsonl``, and neither the user's file nor a backup is
opened through a symbolic link.

A damaged *load* (``bad_checkpoint``) writes nothing of the user's: ``damaged_load`` hands
the load a damaged copy (a temporary file, or bytes in memory), or raises the missing
file's error, so no ledger is needed.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import re
import shutil
import stat
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# The job's ledger folder, set by the parent that restores (a World, ``chaoslight run``).
LEDGER_VARIABLE = "CHAOSLIGHT_DAMAGE_LEDGER"
_MANIFEST = "manifest-{pid}.jsonl"
_MANIFEST_NAME = re.compile(r"manifest-[0-9]{1,10}\.jsonl")
_BACKUP_NAME = re.compile(r"backup-[0-9]{1,10}-[A-Za-z0-9_]{1,32}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 20
_READ = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_WRITE = os.O_WRONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class Ledger:
    """Where one process backs up what it damages. ``shared``: a parent made the folder
    and restores from it; otherwise the folder is private, made at the first damage, and
    the process restores (and removes it) on ``close``."""

    def __init__(self, folder: Path | None, shared: bool) -> None:
        self.folder = folder
        self.shared = shared

    def damage(self, path: str, data: bytes) -> None:
        """Back up ``path`` (or note it is absent), then overwrite it with ``data``. A file
        that cannot be backed up, or is not a regular file, is left alone."""
        try:
            before = os.lstat(path)
        except FileNotFoundError:
            before = None
        except OSError:
            return
        if before is not None and not stat.S_ISREG(before.st_mode):
            return  # a device, a pipe, a link: nothing a crash mid-write could truncate
        entry: dict[str, Any] = {
            "path": path,
            "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "at": time.time_ns(),
            "backup": None,
        }
        try:
            folder = self._folder()
            if before is not None:
                fd, backup = tempfile.mkstemp(prefix=f"backup-{os.getpid()}-", dir=folder)
                with os.fdopen(fd, "wb") as copy, _opened(path, _READ, "rb") as original:
                    shutil.copyfileobj(original, copy, _CHUNK)
                entry["backup"] = os.path.basename(backup)
                entry["times"] = [before.st_atime_ns, before.st_mtime_ns]
            # Recorded before the damage: a crash right after it still leaves the record.
            with open(folder / _MANIFEST.format(pid=os.getpid()), "a", encoding="utf-8") as log:
                log.write(json.dumps(entry) + "\n")
        except OSError:
            return  # no backup, no damage: the fault still fires, the file stays whole
        # A file that cannot be written (no such folder, a link put there since) is not
        # damaged: the fault fires.
        flags = _WRITE | os.O_CREAT | os.O_TRUNC
        with contextlib.suppress(OSError), _opened(path, flags, "wb") as damaged:
            damaged.write(data)

    def close(self) -> None:
        """A private ledger: put every damaged file back now and remove the folder."""
        if self.shared or self.folder is None:
            return
        if restore(self.folder):
            shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None

    def _folder(self) -> Path:
        if self.folder is None:
            self.folder = make_ledger()
        return self.folder


class _State:
    ledger: Ledger | None = None  # the active injection's; None: no file may be damaged
    held: list[Path] | None = None  # ledgers kept until the end of a job (``holding``)
    keep: Path | None = None


DAMAGE_STATE = _State()


def make_ledger(inside: Path | None = None) -> Path:
    """A fresh ledger folder, private to this user (0700), in ``inside`` (None: the
    temporary directory): a process's own, or, for a parent, the one its processes fill
    (named to them in ``LEDGER_VARIABLE``)."""
    return Path(tempfile.mkdtemp(prefix="chaoslight-damage-", dir=inside))


def is_private_folder(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a directory itself (no link), this user's, closed to others."""
    try:
        info = os.lstat(path)
    except (OSError, ValueError):
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077


def begin() -> Ledger:
    """The ledger of an injection starting in this process: the job's, when the parent
    that restores named one (an absolute path to a private folder of this user); else a
    private one, restored when the injection ends. A named folder that is gone (a job
    over) or not such a folder is not trusted: the process restores itself."""
    named = os.environ.get(LEDGER_VARIABLE, "")
    if os.path.isabs(named) and is_private_folder(named):
        DAMAGE_STATE.ledger = Ledger(Path(named), shared=True)
    else:
        DAMAGE_STATE.ledger = Ledger(None, shared=False)
    return DAMAGE_STATE.ledger


def end(ledger: Ledger | None) -> None:
    """The injection is over: no more damage; a private ledger restores now."""
    if DAMAGE_STATE.ledger is ledger:
        DAMAGE_STATE.ledger = None
    if ledger is not None:
        ledger.close()


def damage(target: str | os.PathLike[str], data: bytes) -> None:
    """Overwrite the file ``target`` with ``data``, undoably; nothing without a ledger."""
    if DAMAGE_STATE.ledger is not None:
        DAMAGE_STATE.ledger.damage(os.path.realpath(target), data)


def settle(folder: Path) -> None:
    """For a parent, once its processes have ended: restore from ``folder`` now, or, inside
    ``holding``, keep it for the end of the job."""
    if not folder.is_dir():
        return
    if DAMAGE_STATE.held is not None and DAMAGE_STATE.keep is not None:
        kept = DAMAGE_STATE.keep / f"{len(DAMAGE_STATE.held):05d}"
        shutil.move(str(folder), str(kept))
        DAMAGE_STATE.held.append(kept)
        return
    if restore(folder):
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def holding(scratch: Path) -> Iterator[None]:
    """Runs of one job (a schedule's restarts): what one run damaged stays damaged for the
    next, and everything is put back when the block ends."""
    if DAMAGE_STATE.held is not None:  # inside an outer job: that one restores
        yield
        return
    DAMAGE_STATE.keep = Path(tempfile.mkdtemp(prefix="held-damage-", dir=scratch))
    DAMAGE_STATE.held = []
    try:
        yield
    finally:
        folders, keep = DAMAGE_STATE.held, DAMAGE_STATE.keep
        DAMAGE_STATE.held = DAMAGE_STATE.keep = None
        if restore(*folders):
            shutil.rmtree(keep, ignore_errors=True)


def restore(*folders: Path) -> bool:
    """Put back every file the ledgers in ``folders`` damaged, newest damage first; True
    when all went back (else each failure is warned about and its backup kept)."""
    done = True
    for folder in folders:
        if not is_private_folder(folder):
            done = False
            warnings.warn(
                f"chaoslight did not read the damage ledger {folder}: it is not a private "
                "folder of this user, so its entries could have been written by anyone",
                RuntimeWarning,
                stacklevel=2,
            )
    entries = [(entry, folder) for folder in folders for entry in _entries(folder)]
    entries.sort(key=lambda pair: pair[0]["at"], reverse=True)
    for entry, folder in entries:
        try:
            _put_back(entry, folder)
        except OSError as exc:
            done = False
            warnings.warn(
                f"chaoslight could not put back {entry['path']!r} after a fault damaged "
                f"it ({exc}); its original is kept in {folder}",
                RuntimeWarning,
                stacklevel=2,
            )
    return done


def _entries(folder: Path) -> list[dict[str, Any]]:
    """The well-formed entries of the ledger ``folder``'s manifests; nothing from a folder
    that is not a private one, a manifest that is not a plain file, or a malformed line."""
    if not is_private_folder(folder):
        return []  # said by ``restore``
    entries = []
    for name in sorted(os.listdir(folder)):
        if not _MANIFEST_NAME.fullmatch(name):
            continue
        try:
            with _opened(str(folder / name), _READ, "rb") as manifest:
                lines = manifest.read().decode("utf-8", errors="replace").splitlines()
        except OSError:
            continue  # a link, or not a file: no process of the job wrote it
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # cut short by a kill: that damage was never written
            if _well_formed(entry):
                entries.append(entry)
    return entries


def _well_formed(entry: Any) -> bool:
    """An entry as ``Ledger.damage`` writes it: an absolute path, a size and digest, and
    a backup that is a plain name of a backup file (or None: there was no file)."""
    if not isinstance(entry, dict):
        return False
    path, size, digest = entry.get("path"), entry.get("size"), entry.get("sha256")
    backup, times = entry.get("backup"), entry.get("times")
    if not (isinstance(path, str) and os.path.isabs(path) and isinstance(entry.get("at"), int)):
        return False
    if not (isinstance(size, int) and size >= 0 and isinstance(digest, str)):
        return False
    if _SHA256.fullmatch(digest) is None:
        return False
    if backup is not None and not (isinstance(backup, str) and _BACKUP_NAME.fullmatch(backup)):
        return False  # an absolute path, a ``..``: nothing the ledger's own backups are
    return times is None or (
        isinstance(times, list) and len(times) == 2 and all(isinstance(t, int) for t in times)
    )


def _put_back(entry: dict[str, Any], folder: Path) -> None:
    path = entry["path"]
    if not _holds(path, entry["size"], entry["sha256"]):
        return  # the program wrote or removed it since: that is the program's change
    if entry["backup"] is None:
        os.remove(path)  # the damaged file itself: ``_holds`` opened it, not a link
        return
    with (
        _opened(str(folder / entry["backup"]), _READ, "rb") as original,
        _opened(path, _WRITE | os.O_TRUNC, "wb") as handle,
    ):
        shutil.copyfileobj(original, handle, _CHUNK)
        handle.flush()
        if entry.get("times"):
            atime, mtime = entry["times"]
            os.utime(handle.fileno(), ns=(atime, mtime))


def _holds(path: str, size: int, sha256: str) -> bool:
    """Whether the file at ``path`` (not a link) holds exactly the damaged bytes."""
    try:
        with _opened(path, _READ, "rb") as handle:
            if os.fstat(handle.fileno()).st_size != size:
                return False
            digest = hashlib.sha256()
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
    except OSError:
        return False
    return digest.hexdigest() == sha256


@contextlib.contextmanager
def _opened(path: str, flags: int, mode: str) -> Iterator[Any]:
    """``path`` opened with ``flags`` (``O_NOFOLLOW``: a link is refused) as a regular
    file, else ``OSError``."""
    fd = os.open(path, flags, 0o666)  # a file it creates gets the umask's mode, as open()
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        handle = os.fdopen(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle


def damaged_load(
    call: Callable[..., Any], effect: str, mark: Callable[[BaseException], BaseException]
) -> Callable[..., Any]:
    """The load ``call`` (``torch.load(f, ...)`` or a strategy's ``load_checkpoint(path)``)
    reading its checkpoint ``truncated`` (its first half), ``empty`` or ``missing``, so it
    raises what it raises for such a file. The user's file is never written: a damaged
    copy (a temporary file, or bytes in memory for a file object) is read in its place;
    a missing one raises ``FileNotFoundError`` as opening it would, ``mark``-ed as
    chaoslight's deliberate raise. A path that is not a regular file (a sharded
    checkpoint's folder) is loaded as it is."""

    def load(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        key = next((k for k in ("f", "checkpoint_path", "path") if k in kwargs), None)
        source = args[0] if args else kwargs.get(key) if key else None
        if isinstance(source, (str, os.PathLike)) and not os.path.isfile(source):
            return call(*args, **kwargs)  # not a file: nothing this fault models
        if effect == "missing":
            name = os.fspath(source) if isinstance(source, (str, os.PathLike)) else "<file>"
            name = str(getattr(source, "name", name))
            raise mark(FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name))
        with _damaged_copy(source, effect) as copy:
            if key is not None and not args:
                return call(*args, **{**kwargs, key: copy})
            return call(copy, *args[1:], **kwargs)

    return load


@contextlib.contextmanager
def _damaged_copy(source: Any, effect: str) -> Iterator[Any]:
    """A copy of the checkpoint ``source`` (a path or a readable file object) with only its
    first half (``truncated``) or nothing (``empty``): a path for a path, bytes for a file."""
    if isinstance(source, (str, os.PathLike)):
        keep = os.path.getsize(source) // 2 if effect == "truncated" else 0
        folder = tempfile.mkdtemp(prefix="chaoslight-damaged-load-")
        copy = os.path.join(folder, os.path.basename(os.fspath(source)))
        try:
            with open(source, "rb") as original, open(copy, "wb") as damaged:
                damaged.write(original.read(keep))
            yield copy
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return
    data = source.read() if hasattr(source, "read") else b""
    yield io.BytesIO(data[: len(data) // 2] if effect == "truncated" else b"")
