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
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Callable
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


def append_reads(store_root: str | os.PathLike, *, time: float, object_id: int, uid: int,
                 reads: int, nbytes: int, path: str) -> None:
    """Append one READS record to ``store_root/reads.log`` as the mount does: one ``write`` to
    the ``O_APPEND`` file, never through a symbolic link."""
    line = (f"READS {time:.9f} {object_id} {uid} {reads} {nbytes} "
            f"{encode_path(path)}\n").encode("ascii")
    fd = os.open(Path(store_root) / READ_LOG,
                 os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        if os.write(fd, line) != len(line):
            raise ScratchkeeperError(f"{store_root}/{READ_LOG}: short write")
    finally:
        os.close(fd)


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
