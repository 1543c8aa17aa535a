"""The local store's namespace database and garbage collection.

The files themselves live in the MDT (:mod:`.mdt`); ``store_root/namespace.db`` keeps the
OSTs' states, the object *intents* and the rebuilds, in a rollback journal. Its ``BEGIN
IMMEDIATE`` transactions are also the store's mutex for changes of the MDT. It is the store
owner's alone (0600): its intents and rebuilds name files, which another user may not see. A
process of the owner (or root) that may not write it opens it read-only; any other user's
process never opens it, and reads through the scratch mount (:mod:`.users`).

Crash safety without a lock server (docs/mount.rst, "Crash safety"): every object is created
under an intent row written before the object exists (owned by a live process, or by a
rebuild). A new file's intents are marked *committing* once its inode is prepared and synced,
before it is linked into the MDT; they are released after. Objects a commit drops are marked
*doomed* after it. Whoever opens the store next deletes doomed objects and the objects of
non-committing intents whose process is gone, releases committing ones without deleting
anything, and removes staging inodes of dead processes: a kill -9 at any line leaves no half
file and loses no committed one (at worst a commit in flight leaks its objects).

Locks: every access goes through :class:`~scratchkeeper.state.StateStore`, which waits for
other processes' locks with a bounded busy timeout and retries (docs/storage.rst).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat as statmod
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ...errors import PermissionDenied, ScratchkeeperError, StateError, StorageError
from ...state import DatabaseBusy, StateStore, may_write
from ..base import OST_ACTIVE, OST_FAILED
from ..layout import FileLayout, StripeObject
from .mdt import REMOVED, keep_root_shown, read_layout
from .objects import close_dir, close_file, make_dir
from .processes import dead_owner_of, process_alive

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
    # the files moved to the MDT (their rows first, by NamespaceMixin._move_files_to_mdt)
    """
    ALTER TABLE object_intents ADD COLUMN committing INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE rebuilds ADD COLUMN base_layout TEXT;
    DROP TABLE xattrs;
    DROP TABLE file_osts;
    DROP TABLE files;
    """,
    # a committing intent names the inode that is to hold (or to stop holding) its object, so
    # that the collector can tell, after a crash, which side of the layout switch it is on
    """
    ALTER TABLE object_intents ADD COLUMN held_by TEXT;
    ALTER TABLE object_intents ADD COLUMN held_ino INTEGER;
    """,
    # no table changes: every object was made 0600 and the store's directories 0700 (by
    # NamespaceMixin._close_store, before this version is recorded: an interrupted pass is
    # run again by the next open)
    """
    -- objects closed to other users (issue 30)
    """,
]
#: the first version whose objects are all 0600 (earlier ones carried their file's read bits)
OBJECTS_CLOSED_VERSION = 4

DOOMED = "doomed"
# a rollback journal, not WAL: readers that may not write (users' jobs) need no -shm/-wal files
NAMESPACE_JOURNAL = "persist"
NAMESPACE = "namespace.db"


class NamespaceMixin:
    """The namespace side of :class:`~scratchkeeper.storage.local.LocalStripedStore`: opening
    the database, its rows, intents and garbage collection."""

    @property
    def db(self) -> StateStore:
        """The namespace database, created with the OST directories on first use. A process
        reading through the scratch mount has none: :class:`PermissionDenied`."""
        if self._db is None:
            self._ensure_open()
            if self._db is None:
                raise PermissionDenied(f"the store at {self.store_root} keeps its namespace for "
                                       f"its owner (uid {self._owner_uid}); uid {os.geteuid()} "
                                       "reads the store through the scratch mount only")
        return self._db

    def _ensure_open(self) -> None:
        """Open the store once: the namespace database, or (another user) the scratch mount."""
        if self._db is None and not self._through_mount:
            with self._ready_lock:
                if self._db is None and not self._through_mount:
                    self._db = self._open()

    @property
    def read_only(self) -> bool:
        """Whether this process opened the store read-only (it may not write the namespace)."""
        self._ensure_open()
        return self._read_only

    def _open(self) -> StateStore | None:
        namespace = self.store_root / NAMESPACE
        if namespace.exists():
            if not may_write(namespace):
                return self._open_read_only(namespace)
        else:
            self._create_namespace(namespace)
        info = os.stat(namespace)
        self._owner_uid = info.st_uid
        db = StateStore(namespace, journal=NAMESPACE_JOURNAL)
        make_dir(self.mdt_root)  # 0700, as the staging and OST directories: the owner's alone
        make_dir(self.staging_root)
        version = db.schema_version(COMPONENT)
        self._close_store((info.st_uid, info.st_gid), objects=version < OBJECTS_CLOSED_VERSION)
        if 0 < version < 2:
            self._migrating = True
            try:
                self._move_files_to_mdt(db)
            finally:
                self._migrating = False
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
        self._opening_garbage = self._collect_garbage()
        return db

    def garbage_collected_at_open(self) -> GarbageReport:
        """What the collection this process ran when it opened the store did."""
        self._ensure_open()
        return getattr(self, "_opening_garbage", None) or GarbageReport()

    def _close_store(self, owner: tuple[int, int], *, objects: bool) -> None:
        """Close what an older store left open to other users, on a read-write open by the
        store's owner (or root): the MDT, staging and OST directories 0700 (the owner's), the
        namespace and its journal 0600; with ``objects``, every object 0600 as well (once: the
        caller records version :data:`OBJECTS_CLOSED_VERSION` after it). ``store_root`` itself
        stays 0755: which OSTs exist and which failed is for everyone to see. Another writer
        (not the owner) cannot change the owner's modes; it meets an older store with a
        refusal, as a read-only open of another version does."""
        if os.geteuid() not in (0, owner[0]):
            if objects:
                raise StorageError(f"{self.store_root}: the store's objects are still open to "
                                   f"other users; the store needs opening by its owner (uid "
                                   f"{owner[0]}) first")
            return
        keep_root_shown(self.mdt_root)  # what users saw at the scratch root stays what they see
        directories = [self.mdt_root, self.staging_root]
        for index in range(self.ost_count):
            directories += [self._ost_dir(index), self._failed_dir(index)]
        for directory in directories:
            close_dir(directory, owner)
        for suffix in ("", "-journal", "-wal", "-shm"):
            close_file(self.store_root / f"{NAMESPACE}{suffix}")
        if objects:
            self._close_objects()

    def _create_namespace(self, namespace: Path) -> None:
        """Create the store directory (0755: its entry names are for everyone) and an empty
        namespace file, the owner's alone (the journal SQLite creates next to it takes its
        mode)."""
        refusal = (f"{self.store_root}: the store has no namespace yet and this process (uid "
                   f"{os.geteuid()}) cannot create it; the store's owner must open it first")
        if self.store_root.is_dir() and not may_write(namespace):
            raise StorageError(refusal)
        try:
            make_dir(self.store_root, mode=0o755, parents=True)
            fd = os.open(namespace, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            return  # another process created it first
        except PermissionError as err:
            raise StorageError(f"{refusal} ({err.strerror})") from None
        try:
            os.fchmod(fd, 0o600)
        finally:
            os.close(fd)

    def _open_read_only(self, namespace: Path) -> StateStore | None:
        """Open the namespace of a store this process may not change: no migration, no fixup of
        OST directories, no garbage collection; reads only. A process that is neither the
        store's owner nor root reads through the scratch mount instead (None: no database)."""
        self._owner_uid = os.stat(namespace).st_uid
        self._read_only = True
        if os.geteuid() not in (0, self._owner_uid):
            self._open_through_mount()
            return None
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
        log.debug("store %s: opened read-only (uid %d; the store is uid %d's)", self.store_root,
                  os.geteuid(), self._owner_uid)
        return db

    def _check_writable(self) -> None:
        """Refuse a change when this process opened the store read-only."""
        self._ensure_open()
        if self._read_only:
            if self._owner_uid == os.geteuid():
                raise PermissionDenied(f"the store at {self.store_root} cannot be written by this "
                                       "process (its namespace or directory is read-only)")
            raise PermissionDenied(f"the store at {self.store_root} is owned by uid "
                                   f"{self._owner_uid}; only its owner can change it (this "
                                   f"process runs as uid {os.geteuid()})")

    def _move_files_to_mdt(self, db: StateStore) -> None:
        """Migration to version 2: every file row of the namespace database becomes an MDT
        inode (size, owner, mode, mtime, layout, xattrs), in the transaction that then drops
        the tables. A crash in between leaves the rows; the next open redoes the move, passing
        over the inodes made already."""
        with db.transaction() as conn:
            if "files" not in {row[0] for row in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'")}:
                return
            rows = conn.execute("SELECT * FROM files ORDER BY path").fetchall()
            xattrs: dict[str, dict[str, bytes]] = {}
            for row in conn.execute("SELECT path, name, value FROM xattrs"):
                xattrs.setdefault(row["path"], {})[row["name"]] = bytes(row["value"])
            for row in rows:
                full = row["path"]
                layout = replace(FileLayout.from_dict(json.loads(row["layout"])),
                                 layout_gen=row["layout_gen"], path=full)
                existing = self._lookup(full)
                if existing is not None:
                    if existing.layout == layout and existing.size == row["size"]:
                        continue  # moved by an earlier, interrupted migration
                    raise StorageError(f"{full}: cannot move the file into the MDT: another "
                                       "file is there")
                staged = self._stage_inode(layout, size=row["size"], uid=row["uid"],
                                           gid=row["gid"], mode=row["mode"],
                                           mtime_ns=int(round(row["mtime"] * 1e9)),
                                           xattrs=xattrs.get(full))
                try:
                    self._link_staged(staged, full, (row["uid"], row["gid"]))
                except BaseException:
                    self._unstage(staged)
                    raise
            db.ensure_schema(COMPONENT, MIGRATIONS)  # joins this transaction
        log.info("store %s: %d file(s) moved from the namespace database into the MDT",
                 self.store_root, len(rows))

    def _collect_garbage(self) -> GarbageReport | None:
        """Collect garbage; a namespace locked too long leaves it to the next collection (an
        operation that called this has committed already and must not fail for it)."""
        try:
            return self.collect_garbage()
        except DatabaseBusy as err:
            log.warning("store %s: garbage collection left for later: %s", self.store_root, err)
            return None

    def collect_garbage(self) -> GarbageReport:
        """Delete doomed objects and those of non-committing intents whose process is gone,
        release committing intents of dead processes (their file may be in the namespace), and
        remove the staging entries of dead processes. What was done."""
        self._check_writable()
        report = GarbageReport()
        self._doom_removed_in_staging()
        rows = self.db.query("SELECT ost_index, object_id, owner, committing, held_by, held_ino "
                             "FROM object_intents WHERE owner = ? OR owner LIKE 'pid:%'",
                             (DOOMED,))
        forget = []
        holders: dict[tuple, set | None] = {}
        for row in rows:
            owner = row["owner"]
            if owner != DOOMED and process_alive(owner):
                continue
            obj = StripeObject(row["ost_index"], row["object_id"])
            if owner != DOOMED and row["committing"]:
                key = (row["held_by"], row["held_ino"], owner)
                if key not in holders:
                    holders[key] = self._held_objects(*key)
                held = holders[key]
                if held is None or (obj.ost_index, obj.object_id) in held:
                    report.released.append(obj)  # the file may hold it: keep the object
                    forget.append((obj.ost_index, obj.object_id, owner))
                    continue
            if not self._ost_dir(obj.ost_index).is_dir():
                continue  # on a failed OST: deleted once it is restored
            with contextlib.suppress(FileNotFoundError):
                self._object_path(obj).unlink()
            report.deleted.append(obj)
            forget.append((obj.ost_index, obj.object_id, owner))
        if forget:  # the intents of every object handled, in one transaction (its syncs once)
            with self.db.transaction() as conn:
                conn.executemany("DELETE FROM object_intents WHERE ost_index = ? AND "
                                 "object_id = ? AND owner = ?", forget)
        try:
            staged = sorted(os.listdir(self.staging_root))
        except FileNotFoundError:
            staged = []
        for name in staged:
            if dead_owner_of(name) is None:
                continue
            entry = self.staging_root / name
            try:
                if entry.is_dir() and not entry.is_symlink():
                    entry.rmdir()
                else:
                    entry.unlink()
            except FileNotFoundError:
                continue
            except OSError as err:
                log.warning("store %s: cannot remove %s: %s", self.store_root, entry,
                            err.strerror)
                continue
            report.staging.append(name)
        if report:
            log.info("store %s: garbage collected: %s", self.store_root, report.summary())
        return report

    def _held_objects(self, full: str | None, ino: int | None, owner: str) -> set | None:
        """What the inode named by a dead process's committing intents holds, as
        ``(ost_index, object_id)``: its layout's objects when ``full`` still names that inode;
        nothing when the inode is still the process's staging entry (never linked); None when
        it cannot be told (intents from before schema version 3, or the file moved since), and
        then the objects are kept: a leak, never a lost file."""
        if full is None or ino is None:
            return None
        try:
            node = self._lookup(full)
        except (ScratchkeeperError, OSError):
            node = None
        if node is not None and node.st.st_ino == ino:
            return {(o.ost_index, o.object_id) for c in node.layout.components for o in c.objects}
        try:
            names = os.listdir(self.staging_root)
        except FileNotFoundError:
            names = []
        for name in names:
            if not name.startswith(owner + "."):
                continue
            try:
                st = os.lstat(self.staging_root / name)
            except FileNotFoundError:
                continue
            if st.st_ino == ino and statmod.S_ISREG(st.st_mode) and st.st_nlink == 1:
                return set()
        return None

    def _doom_removed_in_staging(self) -> None:
        """Finish the removals dead processes left half-done: a removal first moves the file's
        name into the staging directory (``…-removed``), then dooms its objects. Those of a
        file whose last name that was are doomed here, before the entry goes."""
        try:
            names = os.listdir(self.staging_root)
        except FileNotFoundError:
            return
        doomed: list[StripeObject] = []
        for name in names:
            if not name.endswith(REMOVED) or dead_owner_of(name) is None:
                continue
            try:
                fd = os.open(self.staging_root / name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                st = os.fstat(fd)
                if not statmod.S_ISREG(st.st_mode) or st.st_nlink != 1:
                    continue  # another name still holds the objects
                try:
                    layout = read_layout(fd, name)
                except StorageError as err:
                    log.warning("store %s: a removed file's objects cannot be told: %s",
                                self.store_root, err)
                    continue
                doomed += [o for c in layout.components for o in c.objects]
            finally:
                os.close(fd)
        if doomed:
            with self.db.transaction() as conn:
                self._doom(conn, doomed)

    def _ost_states(self) -> dict[int, str]:
        self._ensure_open()
        if self._through_mount:
            return self._ost_states_by_name()
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

    def _mark_committing(self, objects: Iterable[StripeObject], owner: str, full: str,
                         ino: int) -> None:
        """Before the objects' file (``full``, its MDT inode ``ino``) takes them: from now on a
        dead owner's intents are released when that inode's layout holds the objects, and the
        objects deleted when it does not (the switch never happened)."""
        with self.db.transaction() as conn:
            conn.executemany("UPDATE object_intents SET committing = 1, held_by = ?, "
                             "held_ino = ? WHERE ost_index = ? AND object_id = ? AND owner = ?",
                             [(full, ino, o.ost_index, o.object_id, owner) for o in objects])

    def _claim_dropped(self, objects: Iterable[StripeObject], owner: str, full: str,
                       ino: int) -> None:
        """Before the file (``full``, inode ``ino``) lets go of ``objects``: committing intents
        naming it, so that a crash between the layout switch and the doom is settled by the
        collector (objects the layout still holds are kept, the others deleted)."""
        with self.db.transaction() as conn:
            conn.executemany("INSERT OR IGNORE INTO object_intents(ost_index, object_id, owner, "
                             "committing, held_by, held_ino) VALUES (?, ?, ?, 1, ?, ?)",
                             [(o.ost_index, o.object_id, owner, full, ino) for o in objects])

    def _drop_objects(self, objects: Iterable[StripeObject], owner: str) -> None:
        """Delete the objects an operation claimed but will not commit, then their intents.

        The objects go first (no layout names them; on a full disk that is the space back).
        When the namespace cannot be written now (full, or locked too long), the intents stay
        for the collector of the next open, which deletes what a dead process claimed (and,
        for intents marked committing, leaves them: a leak, never a lost file).
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
                conn.executemany("UPDATE object_intents SET owner = ?, committing = 0 WHERE "
                                 "ost_index = ? AND object_id = ? AND owner = ?",
                                 [(DOOMED, o.ost_index, o.object_id, owner) for o in kept])
        except StateError as err:
            log.warning("store %s: intents of %d dropped object(s) left for the collector: %s",
                        self.store_root, len(deleted) + len(kept), err)

    def _release_claim(self, conn, objects: Iterable[StripeObject], owner: str) -> None:
        conn.executemany("DELETE FROM object_intents WHERE ost_index = ? AND object_id = ? "
                         "AND owner = ?", [(o.ost_index, o.object_id, owner) for o in objects])

    def _release_quietly(self, objects: Iterable[StripeObject], owner: str) -> None:
        """Release the intents of objects a committed file now holds; when the namespace
        cannot be written, they stay committing and the collector releases them later."""
        try:
            with self.db.transaction() as conn:
                self._release_claim(conn, objects, owner)
        except StateError as err:
            log.warning("store %s: committing intents left for the collector: %s",
                        self.store_root, err)

    def _doom_quietly(self, objects: Iterable[StripeObject]) -> None:
        """Doom objects no layout holds any more; when the namespace cannot be written, their
        committing intents stay for the collector, which deletes them by the same test."""
        try:
            with self.db.transaction() as conn:
                self._doom(conn, objects)
        except StateError as err:
            log.warning("store %s: dropped objects left for the collector: %s",
                        self.store_root, err)

    @staticmethod
    def _doom(conn, objects: Iterable[StripeObject]) -> None:
        conn.executemany("INSERT OR REPLACE INTO object_intents(ost_index, object_id, owner) "
                         "VALUES (?, ?, ?)",
                         [(o.ost_index, o.object_id, DOOMED) for o in objects])

    def _doom_file_in(self, conn, full: str, layout: FileLayout | None) -> None:
        """Inside a transaction, once the file's last name is gone: mark its objects for
        collection (``layout`` None: another name still holds them) and abort its rebuilds."""
        if layout is not None:
            self._doom(conn, [o for c in layout.components for o in c.objects])
        for rebuild in conn.execute("SELECT rebuild_id FROM rebuilds WHERE path = ?",
                                    (full,)).fetchall():
            self._abort_in(conn, rebuild["rebuild_id"])

    def _abort_in(self, conn, rebuild_id: str) -> None:
        conn.execute("DELETE FROM rebuilds WHERE rebuild_id = ?", (rebuild_id,))
        conn.execute("UPDATE object_intents SET owner = ? WHERE owner = ?",
                     (DOOMED, f"rebuild:{rebuild_id}"))


@dataclass
class GarbageReport:
    """What one garbage collection did."""

    deleted: list[StripeObject] = field(default_factory=list)   # objects deleted
    released: list[StripeObject] = field(default_factory=list)  # committing intents released
    staging: list[str] = field(default_factory=list)            # staging entries removed

    def __bool__(self) -> bool:
        return bool(self.deleted or self.released or self.staging)

    def merged(self, other: GarbageReport) -> GarbageReport:
        return GarbageReport(self.deleted + other.deleted, self.released + other.released,
                             self.staging + other.staging)

    def summary(self) -> str:
        return (f"{len(self.deleted)} object(s) deleted, {len(self.released)} committing "
                f"intent(s) released, {len(self.staging)} staging entr"
                f"{'y' if len(self.staging) == 1 else 'ies'} removed")
