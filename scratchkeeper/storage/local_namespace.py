"""The local store's namespace: the SQLite database that maps scratch paths to layouts, and
the intents that keep objects from leaking.

``store_root/namespace.db`` holds the files (size, owner, mode, mtime, layout as JSON), the
OSTs' states, extended attributes and in-flight rebuilds, in a rollback journal (a process that
may not write it reads it without creating anything next to it, and opens it read-only).

Crash safety without a lock server: every object is created under an *intent* row written
before the object exists (owned by a live process, or by a rebuild) and only a committed layout
makes it part of a file; objects a commit drops are marked *doomed* in the same transaction and
deleted afterwards. Whoever opens the store next deletes doomed objects and the ones of intents
whose process is gone, so a kill -9 at any line leaves no half file and no leaked object.

Locks: every access goes through :class:`~scratchkeeper.state.StateStore`, which waits for
other processes' locks with a bounded busy timeout and retries (docs/storage.rst).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from ..errors import InputError, PermissionDenied, StateError, StorageError
from ..state import DatabaseBusy, StateStore, may_write
from .base import OST_ACTIVE, OST_FAILED
from .layout import FileLayout, StripeObject
from .local_objects import make_dir

log = logging.getLogger(__name__)

COMPONENT = "storage-local"
MIGRATIONS = [
    """
    CREATE TABLE osts (
        ost_index INTEGER PRIMARY KEY,
        state TEXT NOT NULL DEFAULT 'active'
    );
    CREATE TABLE files (
        path TEXT PRIMARY KEY,
        size INTEGER NOT NULL,
        uid INTEGER NOT NULL,
        gid INTEGER NOT NULL,
        mode INTEGER NOT NULL,
        mtime REAL NOT NULL,
        layout_gen INTEGER NOT NULL,
        layout TEXT NOT NULL
    );
    CREATE TABLE file_osts (
        path TEXT NOT NULL REFERENCES files(path) ON DELETE CASCADE,
        ost_index INTEGER NOT NULL,
        PRIMARY KEY (path, ost_index)
    );
    CREATE INDEX file_osts_by_ost ON file_osts(ost_index);
    CREATE TABLE xattrs (
        path TEXT NOT NULL REFERENCES files(path) ON DELETE CASCADE,
        name TEXT NOT NULL,
        value BLOB NOT NULL,
        PRIMARY KEY (path, name)
    );
    CREATE TABLE object_intents (
        ost_index INTEGER NOT NULL,
        object_id TEXT NOT NULL,
        owner TEXT NOT NULL,
        PRIMARY KEY (ost_index, object_id)
    );
    CREATE TABLE rebuilds (
        rebuild_id TEXT PRIMARY KEY,
        path TEXT NOT NULL,
        record TEXT NOT NULL
    );
    """,
]

DOOMED = "doomed"
# a rollback journal, not WAL: readers that may not write (users' jobs) need no -shm/-wal files
NAMESPACE_JOURNAL = "persist"
NAMESPACE = "namespace.db"


class NamespaceMixin:
    """The namespace side of :class:`~scratchkeeper.storage.local.LocalStripedStore`: opening
    the database, its rows, intents and garbage collection."""

    @property
    def db(self) -> StateStore:
        """The namespace database, created with the OST directories on first use."""
        if self._db is None:
            with self._ready_lock:
                if self._db is None:
                    self._db = self._open()
        return self._db

    @property
    def read_only(self) -> bool:
        """Whether this process opened the store read-only (it may not write the namespace)."""
        self.db
        return self._read_only

    def _open(self) -> StateStore:
        namespace = self.store_root / NAMESPACE
        if namespace.exists():
            if not may_write(namespace):
                return self._open_read_only(namespace)
        else:
            self._create_namespace(namespace)
        self._owner_uid = os.stat(namespace).st_uid
        db = StateStore(namespace, journal=NAMESPACE_JOURNAL)
        db.ensure_schema(COMPONENT, MIGRATIONS)
        # a read first: every data job opens the store, and most opens have no OST to add
        if db.query("SELECT COUNT(*) FROM osts")[0][0] != self.ost_count:
            with db.transaction() as conn:
                known = conn.execute("SELECT COUNT(*) FROM osts").fetchone()[0]
                if known > self.ost_count:
                    raise StorageError(f"{self.store_root}: the store has {known} OSTs, the "
                                       f"configuration says storage.ost_count = "
                                       f"{self.ost_count}; OSTs cannot be removed")
                for index in range(known, self.ost_count):
                    conn.execute("INSERT INTO osts(ost_index, state) VALUES (?, ?)",
                                 (index, OST_ACTIVE))
        for row in db.query("SELECT ost_index, state FROM osts"):
            live, dead = self._ost_dir(row["ost_index"]), self._failed_dir(row["ost_index"])
            # finish a fail/restore that a crash interrupted between the database and the rename
            if row["state"] == OST_FAILED and live.exists():
                live.rename(dead)
            elif row["state"] != OST_FAILED and dead.exists() and not live.exists():
                dead.rename(live)
            elif not live.exists() and not dead.exists():
                make_dir(dead if row["state"] == OST_FAILED else live)
        self._db = db
        self._collect_garbage()
        return db

    def _create_namespace(self, namespace: Path) -> None:
        """Create the store directory and an empty namespace file, readable by every user (the
        journal SQLite creates next to it takes its mode)."""
        refusal = (f"{self.store_root}: the store has no namespace yet and this process (uid "
                   f"{os.geteuid()}) cannot create it; the store's owner must open it first")
        if self.store_root.is_dir() and not may_write(namespace):
            raise StorageError(refusal)
        try:
            make_dir(self.store_root, parents=True)
            fd = os.open(namespace, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return  # another process created it first
        except PermissionError as err:
            raise StorageError(f"{refusal} ({err.strerror})") from None
        try:
            os.fchmod(fd, 0o644)
        finally:
            os.close(fd)

    def _open_read_only(self, namespace: Path) -> StateStore:
        """Open the namespace of a store this process may not change: no migration, no fixup of
        OST directories, no garbage collection; reads only."""
        self._owner_uid = os.stat(namespace).st_uid
        db = StateStore(namespace, journal=NAMESPACE_JOURNAL, read_only=True)
        try:
            version = db.schema_version(COMPONENT)
            known = db.query("SELECT COUNT(*) FROM osts")[0][0] if version else 0
        except StateError as err:
            raise StorageError(f"{self.store_root}: cannot read the store's namespace: {err}") \
                from err
        if version != len(MIGRATIONS):
            raise StorageError(f"{self.store_root}: the store's namespace is at version "
                               f"{version}, this scratchkeeper uses version {len(MIGRATIONS)}; "
                               f"the store needs opening by its owner (uid {self._owner_uid}) "
                               "first")
        if known > self.ost_count:
            raise StorageError(f"{self.store_root}: the store has {known} OSTs, the "
                               f"configuration says storage.ost_count = {self.ost_count}; "
                               "OSTs cannot be removed")
        self._read_only = True
        log.debug("store %s: opened read-only (uid %d; the store is uid %d's)", self.store_root,
                  os.geteuid(), self._owner_uid)
        return db

    def _check_writable(self) -> None:
        """Refuse a change when this process opened the store read-only."""
        self.db
        if self._read_only:
            if self._owner_uid == os.geteuid():
                raise PermissionDenied(f"the store at {self.store_root} cannot be written by this "
                                       "process (its namespace or directory is read-only)")
            raise PermissionDenied(f"the store at {self.store_root} is owned by uid "
                                   f"{self._owner_uid}; only its owner can change it (this "
                                   f"process runs as uid {os.geteuid()})")

    def _collect_garbage(self) -> None:
        """Delete doomed objects and those of intents whose process died; a namespace locked
        too long leaves the rest to the next collection (an operation that called this has
        committed already and must not fail for it)."""
        try:
            self._collect_garbage_now()
        except DatabaseBusy as err:
            log.warning("store %s: garbage collection left for later: %s", self.store_root, err)

    def _collect_garbage_now(self) -> None:
        rows = self.db.query("SELECT ost_index, object_id, owner FROM object_intents "
                             "WHERE owner = ? OR owner LIKE 'pid:%'", (DOOMED,))
        deleted = []
        for row in rows:
            owner = row["owner"]
            if owner != DOOMED and _process_alive(owner):
                continue
            obj = StripeObject(row["ost_index"], row["object_id"])
            if not self._ost_dir(obj.ost_index).is_dir():
                continue  # on a failed OST: deleted once it is restored
            try:
                self._object_path(obj).unlink()
            except FileNotFoundError:
                pass
            deleted.append((obj.ost_index, obj.object_id, owner))
        if deleted:  # the intents of every object deleted, in one transaction (its syncs once)
            with self.db.transaction() as conn:
                conn.executemany("DELETE FROM object_intents WHERE ost_index = ? AND "
                                 "object_id = ? AND owner = ?", deleted)

    def _ost_states(self) -> dict[int, str]:
        return {row["ost_index"]: row["state"]
                for row in self.db.query("SELECT ost_index, state FROM osts")}

    def _healthy(self) -> set[int]:
        return {i for i, state in self._ost_states().items() if state == OST_ACTIVE}

    def _claim_objects(self, objects: Iterable[StripeObject], owner: str) -> None:
        """Record the intent before the objects exist, so a crash cannot leak them."""
        with self.db.transaction() as conn:
            conn.executemany("INSERT INTO object_intents(ost_index, object_id, owner) "
                             "VALUES (?, ?, ?)",
                             [(o.ost_index, o.object_id, owner) for o in objects])

    def _drop_objects(self, objects: Iterable[StripeObject], owner: str) -> None:
        """Delete the objects an operation claimed but will not commit, then their intents.

        The objects go first (no layout names them; on a full disk that is the space back).
        When the namespace cannot be written now (full, or locked too long), the intents stay
        for the collector of the next open, which deletes what a dead process claimed.
        """
        deleted, kept = [], []
        for obj in objects:
            if not self._ost_dir(obj.ost_index).is_dir():
                kept.append(obj)  # on a failed OST: collected once it is restored
                continue
            with contextlib.suppress(FileNotFoundError):
                self._object_path(obj).unlink()
            deleted.append(obj)
        try:
            with self.db.transaction() as conn:
                self._release_claim(conn, deleted, owner)
                conn.executemany("UPDATE object_intents SET owner = ? WHERE ost_index = ? AND "
                                 "object_id = ? AND owner = ?",
                                 [(DOOMED, o.ost_index, o.object_id, owner) for o in kept])
        except StateError as err:
            log.warning("store %s: intents of %d dropped object(s) left for the collector: %s",
                        self.store_root, len(deleted) + len(kept), err)

    def _release_claim(self, conn, objects: Iterable[StripeObject], owner: str) -> None:
        conn.executemany("DELETE FROM object_intents WHERE ost_index = ? AND object_id = ? "
                         "AND owner = ?", [(o.ost_index, o.object_id, owner) for o in objects])

    def _row(self, path: str):
        full = self.paths.resolve(path)
        rows = self.db.query("SELECT * FROM files WHERE path = ?", (full,))
        if not rows:
            raise InputError(f"{full}: no such file in the store")
        return rows[0]

    def _layout_of(self, row) -> FileLayout:
        layout = FileLayout.from_dict(json.loads(row["layout"]))
        return replace(layout, layout_gen=row["layout_gen"], path=row["path"])

    def _insert_file(self, conn, full: str, layout: FileLayout, *, size: int, uid: int, gid: int,
                     mode: int, mtime: float) -> None:
        conn.execute("INSERT INTO files(path, size, uid, gid, mode, mtime, layout_gen, layout) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     (full, size, uid, gid, mode, mtime, layout.layout_gen,
                      json.dumps(layout.to_dict())))
        conn.executemany("INSERT INTO file_osts(path, ost_index) VALUES (?, ?)",
                         [(full, i) for i in sorted(layout.osts())])

    def _store_layout(self, conn, full: str, layout: FileLayout) -> None:
        conn.execute("UPDATE files SET layout = ?, layout_gen = ? WHERE path = ?",
                     (json.dumps(layout.to_dict()), layout.layout_gen, full))
        conn.execute("DELETE FROM file_osts WHERE path = ?", (full,))
        conn.executemany("INSERT INTO file_osts(path, ost_index) VALUES (?, ?)",
                         [(full, i) for i in sorted(layout.osts())])

    def _doom_file_in(self, conn, row) -> None:
        """Inside a transaction: forget the file and mark its objects for collection."""
        layout = self._layout_of(row)
        conn.execute("DELETE FROM files WHERE path = ?", (row["path"],))
        conn.executemany("INSERT OR REPLACE INTO object_intents(ost_index, object_id, owner) "
                         "VALUES (?, ?, ?)",
                         [(o.ost_index, o.object_id, DOOMED)
                          for c in layout.components for o in c.objects])
        for rebuild in conn.execute("SELECT rebuild_id FROM rebuilds WHERE path = ?",
                                    (row["path"],)).fetchall():
            self._abort_in(conn, rebuild["rebuild_id"])

    def _abort_in(self, conn, rebuild_id: str) -> None:
        conn.execute("DELETE FROM rebuilds WHERE rebuild_id = ?", (rebuild_id,))
        conn.execute("UPDATE object_intents SET owner = ? WHERE owner = ?",
                     (DOOMED, f"rebuild:{rebuild_id}"))


def process_owner() -> str:
    """``pid:<pid>:<start time>``: names this process even after its pid is reused."""
    return f"pid:{os.getpid()}:{_start_time(os.getpid())}"


def _start_time(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            # the command name may contain spaces; fields after ')' are fixed
            fields = handle.read().rsplit(")", 1)[1].split()
        return fields[19]
    except (OSError, IndexError):
        return "?"


def _process_alive(owner: str) -> bool:
    _, pid, started = owner.split(":", 2)
    return _start_time(int(pid)) == started and started != "?"
