"""The logs the scratch mount appends in the store's root (docs/mount.rst): ``closes.log``
(CLOSE records, read by offload at close) and ``reads.log`` (READS records, read by tiering).

Each reader keeps how far it read in a table of its own (``name``, ``offset``) of the state
database and saves it only once it acted on what it read, so a crash reads records again
rather than losing them. A log read to its end and longer than :data:`ROTATE_AT` is moved
aside (``NAME.old``; the mount opens the log per write, so its next record starts a new one)
and the moved-aside file is read to its end and removed at the next read.

``closes.log`` is read the other way round (``move_first``): the log is moved aside *before*
it is read, at every read. The mount writes one CLOSE record per file for as long as the log
it wrote it to is the current one (docs/mount.rst "Bounded logs"), and a reader that moved
that log away before reading it sees each of its files as it is *after* every close the mount
left out; the next close of such a file goes to the new log.

Both logs are written as root on behalf of users: by the mount (``mount/native/logs.c``) and,
for ``reads.log``, by recoveryd's ``reads`` request (a reader's reads that did not go through the
mount). Every append goes through a bounded writer with the same rules, the C one in the mount
and :class:`BoundedLog` here, which is the only way this package appends to them.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import threading
import time as _time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar
from urllib.parse import unquote_to_bytes

from ..errors import ScratchkeeperError
from ..state import StateStore

log = logging.getLogger(__name__)

#: a log read to its end and longer than this is moved aside
ROTATE_AT = 16 << 20
R = TypeVar("R")


#: the mount's read records (docs/mount.rst "Read records"), which tierd counts
READ_LOG = "reads.log"
_SAFE = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+~")


def encode_path(path: str) -> str:
    """A path as the mount writes it in its records: bytes outside [A-Za-z0-9/._-+~] as %XX."""
    return "".join(chr(b) if b in _SAFE else f"%{b:02X}"
                   for b in path.encode("utf-8", "surrogateescape"))


#: a user's records take at most 1/LOG_SHARES of a log's cap (per generation and writer)
LOG_SHARES = 16
#: users counted per log; a record of one more is dropped (counted as beyond its share)
LOG_MAX_USERS = 4096
#: seconds between two log lines about dropped records
WARN_EVERY = 60.0
#: why a record was not written, as the mount's counters name it
DROP_CAUSES = ("cap", "share", "space")


@dataclass
class _LogUser:
    bytes: int = 0     # in this generation
    records: int = 0   # in this generation
    dropped: int = 0   # since the writer started


class BoundedLog:
    """Appends records to ``store_root/name`` as the mount's bounded writer does (logs.c): a
    record is dropped when it would take the log past ``cap`` bytes, take its user past
    ``cap / LOG_SHARES`` bytes of this generation of the log, or leave less than ``cap`` bytes
    free for users on the store's file system; drops are counted per cause and per user and
    said in one log line a minute at most.

    A *generation* is one file (device, inode): the reader moves the log aside and the next
    append, which opens the log anew, starts a new one with every user's share unspent. The
    counts are this writer's (the mount counts its own records), so a user's records in one
    generation take at most one share through each writer. Safe to share across threads.
    """

    def __init__(self, store_root: str | os.PathLike, name: str, cap: int, *,
                 clock: Callable[[], float] = _time.monotonic):
        self.path = Path(store_root) / name
        self.name, self.cap, self.share = name, cap, cap // LOG_SHARES
        self._clock = clock
        self._lock = threading.Lock()
        self._generation: tuple[int, int] | None = None
        self.generations = 0
        self.size = 0
        self.written = 0
        self.dropped = dict.fromkeys(DROP_CAUSES, 0)
        self._users: dict[int, _LogUser] = {}
        self._unwarned, self._warned, self._last_dropped = 0, float("-inf"), -1

    def append(self, uid: int, record: bytes) -> str | None:
        """Write ``record`` (one line) for ``uid``: None when written, else why it was dropped
        (one of :data:`DROP_CAUSES`). One ``write`` to the ``O_APPEND`` file, never through a
        link nor to anything but a regular file."""
        with self._lock:
            try:   # O_NONBLOCK: a FIFO put in its place is never waited on (refused below)
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                             | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
            except OSError as err:
                raise ScratchkeeperError(f"{self.path}: {err.strerror}") from None
            try:
                info, space = os.fstat(fd), os.fstatvfs(fd)
                if not stat.S_ISREG(info.st_mode):
                    raise ScratchkeeperError(f"{self.path}: not a regular file")
                self._follow(info)
                avail = space.f_bavail * space.f_frsize
                cause = self._admit(uid, len(record), info.st_size, avail)
                if cause is None:
                    if os.write(fd, record) != len(record):
                        raise ScratchkeeperError(f"{self.path}: short write")
                    user = self._users[uid]
                    user.bytes += len(record)
                    user.records += 1
                    self.written += 1
                    self.size = info.st_size + len(record)
                else:
                    self.size = info.st_size
                self._warn()
                return cause
            finally:
                os.close(fd)

    def _follow(self, info: os.stat_result) -> None:
        """A log file other than the last one (moved aside by its reader): a new generation."""
        identity = (info.st_dev, info.st_ino)
        if identity == self._generation:
            return
        self._generation = identity
        self.generations += 1
        for user in self._users.values():
            user.bytes = user.records = 0

    def _admit(self, uid: int, length: int, size: int, avail: int) -> str | None:
        user = self._users.get(uid)
        if user is None and len(self._users) < LOG_MAX_USERS:
            user = self._users[uid] = _LogUser()
        cause = ("cap" if size + length > self.cap
                 else "share" if user is None or user.bytes + length > self.share
                 else "space" if avail < self.cap + length
                 else None)
        if cause is not None:
            self.dropped[cause] += 1
            if user is not None:
                user.dropped += 1
            self._unwarned += 1
            self._last_dropped = uid
        return cause

    def _warn(self) -> None:
        now = self._clock()
        if not self._unwarned or now - self._warned < WARN_EVERY:
            return
        log.warning("%s: %d record(s) dropped (the log holds at most %d bytes, a user's records "
                    "%d; last dropped: uid %d)", self.path, self._unwarned, self.cap, self.share,
                    self._last_dropped)
        self._unwarned, self._warned = 0, now

    def stats(self, caller: int) -> dict:
        """The counters as the mount's ``user.scratchkeeper.logs`` gives one log's: ``caller``
        (a uid) sees their own line of ``users`` only, root every line."""
        with self._lock:
            users = {str(uid): {"bytes": u.bytes, "records": u.records, "dropped": u.dropped}
                     for uid, u in self._users.items() if caller in (0, uid)}
            return {"cap": self.cap, "share": self.share, "generation": self.generations,
                    "size": self.size, "written": self.written, "coalesced": 0,
                    "dropped": dict(self.dropped), "users": users}


def reads_record(*, time: float, object_id: int, uid: int, reads: int, nbytes: int,
                 path: str) -> bytes:
    """One READS record as the mount writes it (docs/mount.rst "Read records")."""
    return (f"READS {time:.9f} {object_id} {uid} {reads} {nbytes} "
            f"{encode_path(path)}\n").encode("ascii")


def decode_path(field: bytes) -> str:
    """A record's %XX-encoded absolute path; ValueError for anything else."""
    path = unquote_to_bytes(field.decode("ascii")).decode("utf-8", "surrogateescape")
    if not path.startswith("/") or "\0" in path:
        raise ValueError(f"not an absolute path: {path[:120]!r}")
    return path


class MountLog(Generic[R]):
    """Reads the records of ``store_root/name`` not read before; ``table`` (a name of the
    reader's own, never a user's) holds the offsets."""

    def __init__(self, store: StateStore, table: str, store_root: str, name: str,
                 parse: Callable[[bytes], R], *, move_first: bool = False):
        if not re.fullmatch(r"[a-z_]+", table):
            raise ValueError(f"bad offset table name {table!r}")
        self.store, self.table, self.parse = store, table, parse
        self.name, self.rotated_name = name, name + ".old"
        self.root = Path(store_root)
        self.move_first = move_first

    def read(self) -> tuple[list[R], Callable[[], None]]:
        """The records not read before (a moved-aside log first), and the function that saves
        how far they were read, to call once they were acted on."""
        found: list[R] = []
        offsets = {r["name"]: r["offset"] for r in self.store.query(
            f"SELECT name, offset FROM {self.table}")}
        if self.move_first:
            return self._read_moved(offsets, found)
        rotated, current = self.root / self.rotated_name, self.root / self.name
        drained = rotated.exists()
        if drained:
            # records a writer added after the move: the file goes once they are acted on
            self._read_from(rotated, offsets.get(self.rotated_name, 0), found)
        end = (self._read_from(current, offsets.get(self.name, 0), found)
               if current.exists() else None)

        def commit() -> None:
            updates: dict[str, int] = {}
            if drained:
                rotated.unlink(missing_ok=True)
                updates[self.rotated_name] = 0
            if end is not None:
                updates[self.name] = end
                if end > ROTATE_AT and not rotated.exists():
                    updates[self.rotated_name], updates[self.name] = end, 0
            if updates:
                self._save(updates)
            if end is not None and updates.get(self.rotated_name):
                os.replace(current, rotated)     # drained at the next read
        return found, commit

    def _read_moved(self, offsets: dict[str, int], found: list[R]
                    ) -> tuple[list[R], Callable[[], None]]:
        """``move_first``: the log moved aside (unless a moved-aside one is still there: a
        read not acted on, or records a writer added after the move), then read."""
        rotated, current = self.root / self.rotated_name, self.root / self.name
        if rotated.exists():
            start = offsets.get(self.rotated_name, 0)
        elif current.exists():
            # saved before the move: a crash after it reads the moved log from there again
            # (from where the log was read before, for a log of the older, unmoved kind)
            start = offsets.get(self.name, 0)
            self._save({self.rotated_name: start, self.name: 0})
            os.replace(current, rotated)
        else:
            return found, lambda: None
        end = self._read_from(rotated, start, found)

        def commit() -> None:
            try:
                size = os.lstat(rotated).st_size
            except FileNotFoundError:
                size = end
            if size > end:  # a writer that opened it before the move: read next time
                self._save({self.rotated_name: end})
            else:
                rotated.unlink(missing_ok=True)
                self._save({self.rotated_name: 0})
        return found, commit

    def _save(self, updates: dict[str, int]) -> None:
        with self.store.transaction() as conn:
            for name, offset in updates.items():
                conn.execute(f"INSERT INTO {self.table} (name, offset) VALUES (?, ?) "
                             "ON CONFLICT(name) DO UPDATE SET offset=excluded.offset",
                             (name, offset))

    def _read_from(self, path: Path, offset: int, found: list[R]) -> int:
        """Append the whole records of ``path`` after ``offset``; the offset after the last."""
        try:   # not followed, never waited on: a FIFO or device put there is refused
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as err:
            raise ScratchkeeperError(f"{path}: {err.strerror}") from None
        with open(fd, "rb") as stream:
            info = os.fstat(stream.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise ScratchkeeperError(f"{path}: not a regular file")
            if info.st_size < offset:
                offset = 0  # a new log (the old one was removed by hand)
            stream.seek(offset)
            data = stream.read()
        whole = data.rfind(b"\n") + 1       # a record being written is read next time
        for line in data[:whole].splitlines():
            try:
                found.append(self.parse(line))
            except ValueError as err:
                log.warning("%s: %s", path, err)
        return offset + whole
