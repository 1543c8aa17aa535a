"""The embedded striped store: OSTs are directories under ``store_root``, a SQLite namespace maps
scratch paths to layouts.

``store_root/ost0000 ... ostNNNN`` each hold the objects of one OST, one file per object, filled
exactly as Lustre's RAID-0 fills its objects (see :mod:`.layout`). ``store_root/namespace.db``
holds the files (size, owner, mode, mtime, layout as JSON), the OSTs' states, extended
attributes and in-flight rebuilds.

Crash safety without a lock server: every object is created under an *intent* row written
before the object exists (owned by a live process, or by a rebuild) and only a committed layout
makes it part of a file; objects a commit drops are marked *doomed* in the same transaction and
deleted afterwards. Whoever opens the store next deletes doomed objects and the ones of intents
whose process is gone, so a kill -9 at any line leaves no half file and no leaked object.

Failing an OST renames its directory to ``ostNNNN.failed``: its objects really cannot be
opened, as on a dead OSS, until ``restore_ost`` puts it back.

Several users: every object carries its file's owner and permission bits (without exec bits), so
the kernel lets a user open the objects of the files it may read and no others, as Lustre's OSTs
do. The namespace uses a rollback journal, which a process may read without writing anything
next to it; a process that cannot write the namespace (a user's job, the store being root's)
opens it read-only: it reads, and every change is refused.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import mmap
import os
import posixpath
import stat as statmod
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from ..errors import InputError, PermissionDenied, StateError, StorageError, TargetUnavailable
from ..state import DatabaseBusy, StateStore, may_write
from .base import (OST_ACTIVE, OST_FAILED, OST_UNREACHABLE, FileStat, OstStatus, Rebuild,
                   StorageBackend, pwrite_all, substitute_layout)
from .layout import (Extent, FileLayout, LayoutComponent, LayoutRequest, StripeObject,
                     merge_extents)
from .sources import open_regular, read_sized, space_errors

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
XATTR_MAX = 65536
COPY_CHUNK = 4 << 20


class LocalStripedStore(StorageBackend):
    """Striped object store in a local directory, behaving like a Lustre file system."""

    name = "local"

    def __init__(self, scratch_root: str, store_root: str, *, ost_count: int,
                 default_stripe_count: int = 4, default_stripe_size: int = 1 << 20,
                 pools: dict[str, tuple[int, ...]] | None = None):
        super().__init__(scratch_root, default_stripe_count=default_stripe_count,
                         default_stripe_size=default_stripe_size)
        self.store_root = Path(store_root)
        self.ost_count = ost_count
        self.pools = dict(pools or {})
        self._db: StateStore | None = None
        self._ready_lock = threading.Lock()
        self._read_only = False  # set on open: this process may not write the namespace
        self._owner_uid: int | None = None

    # -- opening -------------------------------------------------------------------------------
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
        with db.transaction() as conn:
            known = conn.execute("SELECT COUNT(*) FROM osts").fetchone()[0]
            if known > self.ost_count:
                raise StorageError(f"{self.store_root}: the store has {known} OSTs, the "
                                   f"configuration says storage.ost_count = {self.ost_count}; "
                                   "OSTs cannot be removed")
            for index in range(known, self.ost_count):
                conn.execute("INSERT INTO osts(ost_index, state) VALUES (?, ?)", (index, OST_ACTIVE))
        for row in db.query("SELECT ost_index, state FROM osts"):
            live, dead = self._ost_dir(row["ost_index"]), self._failed_dir(row["ost_index"])
            # finish a fail/restore that a crash interrupted between the database and the rename
            if row["state"] == OST_FAILED and live.exists():
                live.rename(dead)
            elif row["state"] != OST_FAILED and dead.exists() and not live.exists():
                dead.rename(live)
            elif not live.exists() and not dead.exists():
                _make_dir(dead if row["state"] == OST_FAILED else live)
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
            _make_dir(self.store_root, parents=True)
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

    def _ost_dir(self, ost_index: int) -> Path:
        return self.store_root / f"ost{ost_index:04d}"

    def _failed_dir(self, ost_index: int) -> Path:
        return self.store_root / f"ost{ost_index:04d}.failed"

    def _object_path(self, obj: StripeObject) -> Path:
        return self._ost_dir(obj.ost_index) / obj.object_id

    # -- garbage collection of objects no layout owns ------------------------------------------
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
            with self.db.transaction() as conn:
                conn.execute("DELETE FROM object_intents WHERE ost_index = ? AND object_id = ? "
                             "AND owner = ?", (obj.ost_index, obj.object_id, owner))

    # -- OSTs ----------------------------------------------------------------------------------
    def _ost_states(self) -> dict[int, str]:
        return {row["ost_index"]: row["state"]
                for row in self.db.query("SELECT ost_index, state FROM osts")}

    def _healthy(self) -> set[int]:
        return {i for i, state in self._ost_states().items() if state == OST_ACTIVE}

    def _check_ost_index(self, ost_index: int) -> None:
        if not 0 <= ost_index < self.ost_count:
            raise InputError(f"OST {ost_index}: no such OST (the store has OSTs 0-"
                             f"{self.ost_count - 1})")

    def list_osts(self) -> list[OstStatus]:
        states = self._ost_states()
        vfs = os.statvfs(self.store_root)
        total = vfs.f_blocks * vfs.f_frsize
        available = vfs.f_bavail * vfs.f_frsize
        result = []
        for index in sorted(states):
            name = f"ost{index:04d}"
            if states[index] == OST_FAILED:
                result.append(OstStatus(index, name, OST_FAILED, detail="failed by fail-ost"))
                continue
            result.append(OstStatus(index, name, states[index], total,
                                    _directory_bytes(self._ost_dir(index)), available))
        return result

    def _probe_ost(self, ost: OstStatus, timeout: float) -> OstStatus:
        """Write, read back and delete a small probe object, as an OST ping touches the disk.

        A process that opened the store read-only may not write there: it lists the OST.
        """
        directory = self._ost_dir(ost.ost_index)
        if self.read_only:
            try:
                with os.scandir(directory) as entries:
                    next(entries, None)
            except OSError as err:
                return replace(ost, state=OST_FAILED if not directory.exists() else
                               OST_UNREACHABLE, detail=err.strerror or str(err))
            return replace(ost, state=OST_ACTIVE, detail="")
        probe = directory / f".probe-{os.getpid()}-{threading.get_ident()}"
        token = uuid.uuid4().bytes
        try:
            probe.write_bytes(token)
            answer = probe.read_bytes()
            probe.unlink()
        except OSError as err:
            return replace(ost, state=OST_FAILED if not directory.exists() else OST_UNREACHABLE,
                           detail=err.strerror or str(err))
        if answer != token:
            return replace(ost, state=OST_UNREACHABLE, detail="probe read back different bytes")
        return replace(ost, state=OST_ACTIVE, detail="")

    def fail_ost(self, ost_index: int) -> None:
        """Take an OST down: its objects become unreadable until :meth:`restore_ost`."""
        self._check_writable()
        self._check_ost_index(ost_index)
        with self.db.transaction() as conn:
            conn.execute("UPDATE osts SET state = ? WHERE ost_index = ?", (OST_FAILED, ost_index))
            live = self._ost_dir(ost_index)
            if live.exists():
                live.rename(self._failed_dir(ost_index))
        log.info("store %s: OST %d failed", self.store_root, ost_index)

    def restore_ost(self, ost_index: int) -> None:
        """Bring a failed OST back with the objects it had."""
        self._check_writable()
        self._check_ost_index(ost_index)
        with self.db.transaction() as conn:
            conn.execute("UPDATE osts SET state = ? WHERE ost_index = ?", (OST_ACTIVE, ost_index))
            dead = self._failed_dir(ost_index)
            if dead.exists():
                dead.rename(self._ost_dir(ost_index))
        log.info("store %s: OST %d restored", self.store_root, ost_index)
        self._collect_garbage()

    # -- allocation ----------------------------------------------------------------------------
    def _choose_osts(self, request: LayoutRequest, exclude: set[int]) -> tuple[int, ...]:
        request.check()
        healthy = self._healthy()
        if request.ost_list is not None:
            for index in request.ost_list:
                self._check_ost_index(index)
                if index not in healthy:
                    raise TargetUnavailable(f"OST {index} is not available", ost_index=index)
                if index in exclude:
                    raise InputError(f"OST {index} already holds a copy of this file")
            return tuple(request.ost_list)
        candidates = healthy - exclude
        if request.pool is not None:
            if request.pool not in self.pools:
                raise InputError(f"pool {request.pool!r}: no such pool (known: "
                                 f"{', '.join(sorted(self.pools)) or 'none'})")
            candidates &= set(self.pools[request.pool])
        if not candidates:
            raise TargetUnavailable("no healthy OST to place the file on")
        count = request.stripe_count if request.stripe_count is not None else \
            self.default_stripe_count
        # like Lustre, a count larger than the OSTs available is reduced, -1 means all
        count = len(candidates) if count == -1 else min(count, len(candidates))
        load = {row["ost_index"]: row["n"] for row in self.db.query(
            "SELECT ost_index, COUNT(*) AS n FROM file_osts GROUP BY ost_index")}
        ordered = sorted(candidates, key=lambda i: (load.get(i, 0), i))
        return tuple(sorted(ordered[:count], key=lambda i: (load.get(i, 0), i)))

    def _new_component(self, request: LayoutRequest, *, mirror_id: int = 0,
                       exclude: set[int] = frozenset()) -> LayoutComponent:
        stripe_size = request.stripe_size or self.default_stripe_size
        osts = self._choose_osts(request, set(exclude))
        objects = tuple(StripeObject(i, uuid.uuid4().hex) for i in osts)
        return LayoutComponent(stripe_size=stripe_size, objects=objects, mirror_id=mirror_id,
                               comp_id=mirror_id << 16 | 1 if mirror_id else 1,
                               pool=request.pool)

    def _claim_objects(self, objects: Iterable[StripeObject], owner: str) -> None:
        """Record the intent before the objects exist, so a crash cannot leak them."""
        with self.db.transaction() as conn:
            conn.executemany("INSERT INTO object_intents(ost_index, object_id, owner) "
                             "VALUES (?, ?, ?)",
                             [(o.ost_index, o.object_id, owner) for o in objects])

    def _create_objects(self, objects: Iterable[StripeObject], *, uid: int, gid: int,
                        mode: int) -> None:
        """Create empty objects for a file of owner ``uid:gid`` and permission bits ``mode``.

        Each object gets the file's owner (when the store runs as root) and its read/write bits
        (never exec; the owner's read and write always): the kernel then lets a user open the
        objects of the files it may read, and no others, as a Lustre OST does.
        """
        object_mode = (mode & 0o666) | 0o600
        as_root = os.geteuid() == 0
        for obj in objects:
            fd = os.open(self._object_path(obj), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                if as_root:
                    os.fchown(fd, uid, gid)
                os.fchmod(fd, object_mode)  # exact, whatever the umask
            finally:
                os.close(fd)

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

    # -- namespace -----------------------------------------------------------------------------
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

    def create(self, path: str, request: LayoutRequest = LayoutRequest(), *,
               owner: tuple[int, int] | None = None, mode: int = 0o644) -> FileLayout:
        full = self._new_path(path)
        uid, gid = owner if owner is not None else (os.getuid(), os.getgid())
        component = self._new_component(request)
        return self._store_new(full, component, uid=uid, gid=gid, mode=mode, mtime=time.time())

    def put_file(self, path: str, source_fd: int, size: int,
                 request: LayoutRequest = LayoutRequest(), *, label: str | None = None,
                 owner: tuple[int, int] | None = None, mode: int = 0o644) -> FileLayout:
        """A new store file holding the ``size`` bytes of the open regular file ``source_fd``.

        The file enters the namespace only once all its bytes are on disk: a failure (a full
        file system, a source that reads shorter or longer than ``size``) leaves no entry and
        no object behind.
        """
        full = self._new_path(path)
        uid, gid = owner if owner is not None else (os.getuid(), os.getgid())
        component = self._new_component(request)
        return self._store_new(full, component, uid=uid, gid=gid, mode=mode, mtime=time.time(),
                               source=(source_fd, size, label or full))

    def _new_path(self, path: str) -> str:
        self._check_writable()
        full = self.paths.resolve(path)
        if full == self.scratch_root:
            raise InputError(f"{full}: is the scratch root, not a file")
        if self.exists(full):
            raise InputError(f"{full}: already exists in the store")
        return full

    def _store_new(self, full: str, component: LayoutComponent, *, uid: int, gid: int,
                   mode: int, mtime: float, source: tuple[int, int, str] | None = None,
                   replaces: bool = False) -> FileLayout:
        """Create a file's objects under an intent, fill them from ``source`` (descriptor,
        size, name for errors) and commit the file in one transaction (dooming the store file
        it ``replaces``); on any failure the objects are dropped and nothing is committed."""
        layout = FileLayout((component,), 0, full)
        size = source[1] if source else 0
        claim = _process_owner()
        self._claim_objects(component.objects, claim)
        try:
            with space_errors(full):
                self._create_objects(component.objects, uid=uid, gid=gid, mode=mode)
                if source:
                    self._copy_in(source[0], size, component, source[2])
            with self.db.transaction() as conn:
                old = conn.execute("SELECT * FROM files WHERE path = ?", (full,)).fetchone()
                if old is not None:
                    if not replaces:
                        raise InputError(f"{full}: already exists in the store")
                    self._doom_file_in(conn, old)
                self._insert_file(conn, full, layout, size=size, uid=uid, gid=gid, mode=mode,
                                  mtime=mtime)
                self._release_claim(conn, component.objects, claim)
        except BaseException:
            self._drop_objects(component.objects, claim)
            raise
        return layout

    def _release_claim(self, conn, objects: Iterable[StripeObject], owner: str) -> None:
        conn.executemany("DELETE FROM object_intents WHERE ost_index = ? AND object_id = ? "
                         "AND owner = ?", [(o.ost_index, o.object_id, owner) for o in objects])

    def import_file(self, path: str, *, stripe_count: int | None = None,
                    stripe_size: int | None = None,
                    owner: tuple[int, int] | None = None, replace: bool = False,
                    expect_uid: int | None = None) -> FileLayout:
        """Move the POSIX file a transfer wrote at ``path`` into the striped store.

        The store file is committed before the POSIX file is unlinked; an import that finds both
        (a crash between the two) finishes by unlinking the POSIX file. ``replace`` lets a new
        transfer supersede a different store file at the same path (a re-staged input), in the
        same transaction that commits the new one. ``expect_uid``: the file must be owned by
        that uid, else :class:`PermissionDenied` and nothing is imported or unlinked.

        The path runs inside directories users can change while root imports: it is walked
        from the real scratch root one directory descriptor at a time, refusing symbolic links,
        and the file is opened and unlinked relative to its directory's descriptor, so no path
        is resolved again after the checks.
        """
        self._check_writable()
        full = self.paths.resolve(path)
        parent_fd, name = self._open_parent(full)
        try:
            fd, info = open_regular(name, label=full, dir_fd=parent_fd, follow_links=False)
            try:
                if expect_uid is not None and info.st_uid != expect_uid:
                    raise PermissionDenied(f"{full}: owned by uid {info.st_uid}, not uid "
                                           f"{expect_uid}")
                existing = self.db.query("SELECT size, mtime FROM files WHERE path = ?", (full,))
                if existing:
                    if existing[0]["size"] == info.st_size and \
                            existing[0]["mtime"] == info.st_mtime:
                        # the earlier import committed, then died before this
                        _unlink_imported(parent_fd, name, info, full)
                        return self.layout(full)
                    if not replace:
                        raise InputError(f"{full}: a different file already exists in the store")
                request = LayoutRequest(stripe_count=stripe_count, stripe_size=stripe_size)
                component = self._new_component(request)
                uid, gid = owner if owner is not None else (info.st_uid, info.st_gid)
                layout = self._store_new(full, component, uid=uid, gid=gid,
                                         mode=statmod.S_IMODE(info.st_mode),
                                         mtime=info.st_mtime, source=(fd, info.st_size, full),
                                         replaces=replace)
            finally:
                os.close(fd)
            _unlink_imported(parent_fd, name, info, full)
        finally:
            os.close(parent_fd)
        if existing:
            self._collect_garbage()
        log.info("store: imported %s (%d bytes, OSTs %s)", full, info.st_size,
                 ",".join(map(str, component.ost_list)))
        return layout

    def _open_parent(self, full: str) -> tuple[int, str]:
        """A descriptor of the directory of scratch path ``full`` and the file's name in it.

        Walked from the real scratch root one component at a time without following links,
        so that a directory a user swaps for a link cannot lead the import elsewhere.
        """
        relative = self.paths.relative(full)
        if not relative:
            raise InputError(f"{full}: is the scratch root, not a file")
        *directories, name = relative.split("/")
        real_root = os.path.realpath(self.scratch_root)
        try:
            fd = os.open(real_root, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as err:
            raise InputError(f"{full}: the scratch root {real_root} cannot be opened: "
                             f"{err.strerror}") from None
        walked = real_root
        try:
            for component in directories + [name]:
                if component in ("", ".", ".."):
                    raise InputError(f"{full}: {component!r} is not allowed in a scratch path")
            for component in directories:
                walked = posixpath.join(walked, component)
                try:
                    child = os.open(component, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                                    dir_fd=fd)
                except FileNotFoundError:
                    raise InputError(f"{full}: no such file to import") from None
                except PermissionError:
                    raise PermissionDenied(f"{full}: permission denied ({walked})") from None
                except OSError as err:
                    if err.errno not in (errno.ENOTDIR, errno.ELOOP):
                        raise StorageError(f"{full}: cannot open {walked}: {err.strerror}") \
                            from err
                    if _is_link(component, fd):
                        raise InputError(f"{full}: {walked} is a symbolic link; refusing to "
                                         "follow it (it may lead outside the scratch root "
                                         f"{real_root})") from None
                    raise InputError(f"{full}: {walked} is not a directory") from None
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd, name

    def _copy_in(self, fd: int, size: int, component: LayoutComponent, label: str) -> None:
        """Copy the ``size`` bytes of the regular file ``fd`` (named ``label``) into the
        component's objects and sync them."""
        handles = self._open_objects(component.objects, os.O_WRONLY)
        try:
            for offset, data in read_sized(fd, size, label, COPY_CHUNK):
                self._write_pieces(component, handles, offset, data)
            for handle in handles.values():
                os.fsync(handle)
        finally:
            for handle in handles.values():
                os.close(handle)

    def _open_objects(self, objects: Iterable[StripeObject], flags: int,
                      path: str | None = None) -> dict[int, int]:
        handles: dict[int, int] = {}
        try:
            for position, obj in enumerate(objects):
                handles[position] = self._open_object(obj, flags, path)
        except BaseException:
            for handle in handles.values():
                os.close(handle)
            raise
        return handles

    def _open_object(self, obj: StripeObject, flags: int, path: str | None = None) -> int:
        """Open one object; a missing OST is :class:`TargetUnavailable`, an object the caller
        may not open (another user's file) :class:`PermissionDenied`, never an OST failure."""
        try:
            return os.open(self._object_path(obj), flags)
        except PermissionError:
            what = "read" if flags & os.O_ACCMODE == os.O_RDONLY else "write"
            raise PermissionDenied(f"{path or 'object ' + obj.object_id}: permission denied "
                                   f"(uid {os.geteuid()} may not {what} it)") from None
        except FileNotFoundError:
            if not self._ost_dir(obj.ost_index).is_dir():
                raise TargetUnavailable(f"{path or 'object ' + obj.object_id}: OST {obj.ost_index} "
                                        "is unavailable", ost_index=obj.ost_index,
                                        path=path) from None
            raise StorageError(f"{path or ''}: object {obj.object_id} is missing from OST "
                               f"{obj.ost_index}") from None

    @staticmethod
    def _write_pieces(component: LayoutComponent, handles: dict[int, int], offset: int,
                      data: bytes, positions: set[int] | None = None) -> None:
        view = memoryview(data)
        for piece in component.pieces(offset, len(data)):
            if positions is not None and piece.position not in positions:
                continue
            start = piece.file_offset - offset
            pwrite_all(handles[piece.position], view[start:start + piece.length],
                       piece.object_offset)

    def _write_range(self, component: LayoutComponent, offset: int, data: bytes, path: str, *,
                     positions: set[int] | None = None, sync: bool = False) -> None:
        """Write ``data`` at file ``offset`` into the objects it falls on (or only ``positions``)."""
        touched = {p.position for p in component.pieces(offset, len(data))}
        if positions is not None:
            touched &= positions
        handles: dict[int, int] = {}
        try:
            for position in sorted(touched):
                handles[position] = self._open_object(component.objects[position], os.O_WRONLY,
                                                      path)
            self._write_pieces(component, handles, offset, data, touched)
            if sync:
                for handle in handles.values():
                    os.fsync(handle)
        finally:
            for handle in handles.values():
                os.close(handle)

    def layout(self, path: str) -> FileLayout:
        return self._layout_of(self._row(path))

    def stat(self, path: str) -> FileStat:
        row = self._row(path)
        return FileStat(row["path"], row["size"], row["uid"], row["gid"], row["mode"], row["mtime"])

    def exists(self, path: str) -> bool:
        full = self.paths.resolve(path)
        return bool(self.db.query("SELECT 1 FROM files WHERE path = ?", (full,)))

    def remove(self, path: str) -> None:
        self._check_writable()
        row = self._row(path)
        with self.db.transaction() as conn:
            self._doom_file_in(conn, row)
        self._collect_garbage()

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

    def list_dir(self, path: str = "") -> list[str]:
        full = self.paths.resolve(path or self.scratch_root)
        if self.db.query("SELECT 1 FROM files WHERE path = ?", (full,)):
            return [os.path.basename(full)]
        prefix = full.rstrip("/") + "/"
        names = set()
        for row in self.db.query("SELECT path FROM files WHERE path >= ? AND path < ?",
                                 (prefix, prefix[:-1] + "0")):  # '0' sorts right after '/'
            rest = row["path"][len(prefix):]
            head, sep, _ = rest.partition("/")
            names.add(head + ("/" if sep else ""))
        return sorted(names)

    def files_on_ost(self, ost_index: int) -> list[str]:
        self._check_ost_index(ost_index)
        return [row["path"] for row in self.db.query(
            "SELECT path FROM file_osts WHERE ost_index = ? ORDER BY path", (ost_index,))]

    # -- data ----------------------------------------------------------------------------------
    def read(self, path: str, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise InputError(f"{path}: negative offset or length")
        row = self._row(path)
        return self._read_through(self._layout_of(row), row["size"], offset, length,
                                  self._healthy())

    def _read_through(self, layout: FileLayout, size: int, offset: int, length: int,
                      healthy: set[int]) -> bytes:
        """Read ``[offset, offset+length)`` of a file of ``size`` bytes through ``layout``."""
        end = min(size, offset + length)
        if end <= offset:
            return b""
        out = bytearray()
        handles: dict[StripeObject, int] = {}
        try:
            position = offset
            while position < end:
                # one stripe piece at a time, each from whichever mirror can serve it
                component = self._serving_component(layout, position, healthy)
                stop = end if component.extent_end is None else min(end, component.extent_end)
                piece = next(component.pieces(position, stop - position))
                obj = component.objects[piece.position]
                if obj.ost_index not in healthy:
                    raise TargetUnavailable(f"{layout.path}: OST {obj.ost_index} is unavailable "
                                            f"(byte {piece.file_offset})",
                                            ost_index=obj.ost_index, path=layout.path)
                handle = handles.get(obj)
                if handle is None:
                    handle = handles[obj] = self._open_object(obj, os.O_RDONLY, layout.path)
                data = os.pread(handle, piece.length, piece.object_offset)
                out += data
                if len(data) < piece.length:  # a hole the writer never filled reads as zeros
                    out += bytes(piece.length - len(data))
                position += piece.length
        finally:
            for handle in handles.values():
                os.close(handle)
        return bytes(out)

    @staticmethod
    def _serving_component(layout: FileLayout, offset: int, healthy: set[int]) -> LayoutComponent:
        """The component (of whichever mirror) whose stripe at ``offset`` is on a healthy OST."""
        covering = [c for c in layout.components if c.covers(offset) and c.objects]
        if not covering:
            raise StorageError(f"{layout.path}: no component covers byte {offset}")
        for comp in covering:
            if comp.objects[comp.position_of(offset)].ost_index in healthy:
                return comp
        return covering[0]

    def write(self, path: str, offset: int, data: bytes) -> None:
        self._check_writable()
        if offset < 0:
            raise InputError(f"{path}: negative offset")
        row = self._row(path)
        layout = self._layout_of(row)
        healthy = self._healthy()
        spans = [(comp, lo, hi) for comp in layout.components
                 for lo, hi in [_span(comp, offset, offset + len(data))] if hi > lo]
        # check every OST first, so that a failed one leaves nothing half-written
        for comp, lo, hi in spans:
            for piece in comp.pieces(lo, hi - lo):
                ost = comp.objects[piece.position].ost_index
                if ost not in healthy:
                    raise TargetUnavailable(f"{layout.path}: OST {ost} is unavailable",
                                            ost_index=ost, path=layout.path)
        with space_errors(layout.path):
            for comp, lo, hi in spans:
                self._write_range(comp, lo, data[lo - offset:hi - offset], layout.path)
        with self.db.transaction() as conn:
            conn.execute("UPDATE files SET size = MAX(size, ?), mtime = ? WHERE path = ?",
                         (offset + len(data), time.time(), row["path"]))

    # -- extended attributes -------------------------------------------------------------------
    def set_xattr(self, path: str, name: str, value: bytes) -> None:
        self.set_xattrs(path, {name: value})

    def set_xattrs(self, path: str, values: dict[str, bytes]) -> None:
        """Set several attributes in one transaction (one lock of the namespace, not one each)."""
        self._check_writable()
        for name, value in values.items():
            _check_xattr_name(name)
            if len(value) > XATTR_MAX:
                raise InputError(f"{path}: xattr {name} value is {len(value)} bytes, over the "
                                 f"{XATTR_MAX}-byte limit")
        row = self._row(path)
        with self.db.transaction() as conn:
            conn.executemany("INSERT INTO xattrs(path, name, value) VALUES (?, ?, ?) "
                             "ON CONFLICT(path, name) DO UPDATE SET value = excluded.value",
                             [(row["path"], name, bytes(value)) for name, value in values.items()])

    def get_xattr(self, path: str, name: str) -> bytes | None:
        row = self._row(path)
        rows = self.db.query("SELECT value FROM xattrs WHERE path = ? AND name = ?",
                             (row["path"], name))
        return bytes(rows[0]["value"]) if rows else None

    def list_xattrs(self, path: str) -> dict[str, bytes]:
        row = self._row(path)
        return {r["name"]: bytes(r["value"]) for r in self.db.query(
            "SELECT name, value FROM xattrs WHERE path = ? ORDER BY name", (row["path"],))}

    def remove_xattr(self, path: str, name: str) -> None:
        self._check_writable()
        row = self._row(path)
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM xattrs WHERE path = ? AND name = ?", (row["path"], name))

    # -- mirrors -------------------------------------------------------------------------------
    def add_mirror(self, path: str, request: LayoutRequest = LayoutRequest()) -> FileLayout:
        self._check_writable()
        row = self._row(path)
        layout = self._layout_of(row)
        if layout.mirror_ids == [0]:
            # as in Lustre, the first mirror of a plain file becomes mirror 1
            layout = replace(layout, components=tuple(
                replace(c, mirror_id=1, comp_id=1 << 16 | 1) for c in layout.components))
        mirror_id = max(layout.mirror_ids) + 1
        if request.stripe_size is None:
            request = replace(request, stripe_size=layout.stripe_size)
        if request.stripe_count is None and request.ost_list is None:
            request = replace(request, stripe_count=layout.stripe_count)
        component = self._new_component(request, mirror_id=mirror_id, exclude=layout.osts())
        claim = _process_owner()
        self._claim_objects(component.objects, claim)
        try:
            self._create_objects(component.objects, uid=row["uid"], gid=row["gid"],
                                 mode=row["mode"])
            source_digest, copy_digest = hashlib.sha256(), hashlib.sha256()
            handles = self._open_objects(component.objects, os.O_WRONLY, layout.path)
            try:
                for offset, chunk in self._chunks(layout.path, row["size"]):
                    source_digest.update(chunk)
                    self._write_pieces(component, handles, offset, chunk)
                for handle in handles.values():
                    os.fsync(handle)
            finally:
                for handle in handles.values():
                    os.close(handle)
            check = FileLayout((component,), 0, layout.path)
            for offset in range(0, row["size"], COPY_CHUNK):
                copy_digest.update(self._read_layout(check, offset,
                                                     min(COPY_CHUNK, row["size"] - offset)))
            if copy_digest.digest() != source_digest.digest():
                raise StorageError(f"{layout.path}: new mirror {mirror_id} does not read back "
                                   "what was written")
            new_layout = FileLayout(layout.components + (component,), layout.layout_gen + 1,
                                    layout.path)
            with self.db.transaction() as conn:
                self._check_unchanged(conn, row)
                self._store_layout(conn, layout.path, new_layout)
                self._release_claim(conn, component.objects, claim)
        except BaseException:
            self._drop_objects(component.objects, claim)
            raise
        return new_layout

    def _chunks(self, path: str, size: int):
        for offset in range(0, size, COPY_CHUNK):
            yield offset, self.read(path, offset, min(COPY_CHUNK, size - offset))

    def _read_layout(self, layout: FileLayout, offset: int, length: int) -> bytes:
        """Read through one given single-component layout only (verification of a new copy)."""
        component = layout.first
        out = bytearray()
        handles = self._open_objects(component.objects, os.O_RDONLY, layout.path)
        try:
            for piece in component.pieces(offset, length):
                data = os.pread(handles[piece.position], piece.length, piece.object_offset)
                out += data + bytes(piece.length - len(data))
        finally:
            for handle in handles.values():
                os.close(handle)
        return bytes(out)

    def _check_unchanged(self, conn, row) -> None:
        now = conn.execute("SELECT layout_gen, size FROM files WHERE path = ?",
                           (row["path"],)).fetchone()
        if now is None or now["layout_gen"] != row["layout_gen"] or now["size"] != row["size"]:
            raise StorageError(f"{row['path']}: the file changed during the operation; retry")

    def remove_mirror(self, path: str, mirror_id: int) -> FileLayout:
        self._check_writable()
        row = self._row(path)
        layout = self._layout_of(row)
        if mirror_id not in layout.mirror_ids:
            raise InputError(f"{layout.path}: no mirror {mirror_id} (mirrors: "
                             f"{', '.join(map(str, layout.mirror_ids))})")
        if len(layout.mirror_ids) == 1:
            raise InputError(f"{layout.path}: mirror {mirror_id} is the last copy of the file")
        kept = tuple(c for c in layout.components if c.mirror_id != mirror_id)
        dropped = [o for c in layout.components if c.mirror_id == mirror_id for o in c.objects]
        new_layout = FileLayout(kept, layout.layout_gen + 1, layout.path)
        with self.db.transaction() as conn:
            self._check_unchanged(conn, row)
            self._store_layout(conn, layout.path, new_layout)
            conn.executemany("INSERT OR REPLACE INTO object_intents(ost_index, object_id, owner) "
                             "VALUES (?, ?, ?)",
                             [(o.ost_index, o.object_id, DOOMED) for o in dropped])
        self._collect_garbage()
        return new_layout

    # -- rebuilding lost stripes ---------------------------------------------------------------
    def begin_rebuild(self, path: str, substitutes: dict[int, int]) -> Rebuild:
        self._check_writable()
        row = self._row(path)
        layout = self._layout_of(row)
        healthy = self._healthy()
        for substitute in substitutes.values():
            self._check_ost_index(substitute)
            if substitute not in healthy:
                raise TargetUnavailable(f"{layout.path}: substitute OST {substitute} is not "
                                        "available", ost_index=substitute, path=layout.path)
        lost = self._rebuild_plan(layout, row["size"], substitutes)
        new_layout = substitute_layout(layout, substitutes, lambda c, p: uuid.uuid4().hex)
        new_objects = _added_objects(layout, new_layout)
        rebuild = Rebuild(uuid.uuid4().hex, layout.path, dict(substitutes), row["size"],
                          layout.layout_gen, new_layout, lost)
        owner = f"rebuild:{rebuild.rebuild_id}"
        with self.db.transaction() as conn:
            conn.execute("INSERT INTO rebuilds(rebuild_id, path, record) VALUES (?, ?, ?)",
                         (rebuild.rebuild_id, layout.path, json.dumps(rebuild.to_dict())))
            conn.executemany("INSERT INTO object_intents(ost_index, object_id, owner) "
                             "VALUES (?, ?, ?)",
                             [(o.ost_index, o.object_id, owner) for o in new_objects])
        self._create_objects(new_objects, uid=row["uid"], gid=row["gid"], mode=row["mode"])
        log.info("store: rebuild %s of %s begun: %s", rebuild.rebuild_id, layout.path,
                 ", ".join(f"OST {f} -> {s}" for f, s in substitutes.items()))
        return rebuild

    def _load_rebuild(self, conn, rebuild_id: str) -> Rebuild:
        found = conn.execute("SELECT record FROM rebuilds WHERE rebuild_id = ?",
                             (rebuild_id,)).fetchone()
        if found is None:
            raise StorageError(f"rebuild {rebuild_id}: no such rebuild (committed or aborted)")
        return Rebuild.from_dict(json.loads(found["record"]))

    def write_rebuild_batch(self, rebuild: Rebuild, pieces: list[tuple[int, bytes]], *,
                            record: bool = True) -> None:
        """Patch several lost ranges (with ``record``, one journal update for all of them).

        The bytes go to the disk with ``O_DIRECT`` where they can (:class:`_PatchWriter`);
        the rest is not synced here, only its writeback started, and :meth:`commit_rebuild`
        syncs before the layout switch. The journal's "patched" therefore says "written",
        not "on disk": a rebuild resumed after a crash re-verifies what it patched before
        (recovery does), so bytes a power loss took are fetched again.
        """
        self._check_writable()
        extents = [self._check_patch(rebuild, offset, data) for offset, data in pieces]
        writers: dict[StripeObject, _PatchWriter] = {}
        try:
            for (offset, data), extent in zip(pieces, extents):
                for comp in rebuild.new_layout.components:
                    lo, hi = _span(comp, offset, extent.end)
                    if hi <= lo:
                        continue
                    view = memoryview(data)
                    aligned = isinstance(data, mmap.mmap)  # starts on a page (a BufferPool's)
                    for piece in comp.pieces(lo, hi - lo):
                        obj = comp.objects[piece.position]
                        # only the substitute objects: the surviving ones hold their bytes
                        if obj.ost_index not in rebuild.substitutes.values():
                            continue
                        writer = writers.get(obj)
                        if writer is None:
                            writer = writers[obj] = _PatchWriter(
                                lambda flags, obj=obj: self._open_object(obj, flags,
                                                                         rebuild.path))
                        start = piece.file_offset - offset
                        writer.write(view[start:start + piece.length], piece.object_offset,
                                     aligned=aligned and start % DIRECT_ALIGN == 0)
            for writer in writers.values():
                writer.start_writeback()
        finally:
            for writer in writers.values():
                writer.close()
        if record:
            self.record_patched(rebuild, extents)

    def record_patched(self, rebuild: Rebuild, extents: list[Extent]) -> None:
        self._check_writable()
        extents = self._check_recorded(rebuild, extents)
        if not extents:
            return
        with self.db.transaction() as conn:
            current = self._load_rebuild(conn, rebuild.rebuild_id)
            current.patched = merge_extents(current.patched + extents)
            conn.execute("UPDATE rebuilds SET record = ? WHERE rebuild_id = ?",
                         (json.dumps(current.to_dict()), rebuild.rebuild_id))
        rebuild.patched = current.patched

    def read_rebuild(self, rebuild: Rebuild, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise InputError(f"{rebuild.path}: negative offset or length")
        layout = replace(rebuild.new_layout, path=rebuild.path)
        return self._read_through(layout, rebuild.file_size, offset, length, self._healthy())

    def commit_rebuild(self, rebuild: Rebuild, patched: list[Extent] = ()) -> FileLayout:
        self._check_writable()
        owner = f"rebuild:{rebuild.rebuild_id}"
        patched = self._check_recorded(rebuild, patched)
        current = self._load_rebuild(self.db.connection(), rebuild.rebuild_id)
        current.patched = merge_extents(current.patched + patched)
        self._check_complete(current)
        # the new layout may only point at objects whose bytes are on disk
        self._sync_objects(_added_objects(self._layout_of(self._row(current.path)),
                                          current.new_layout), current.path)
        with self.db.transaction() as conn:
            current = self._load_rebuild(conn, rebuild.rebuild_id)
            current.patched = merge_extents(current.patched + patched)
            self._check_complete(current)
            row = conn.execute("SELECT layout_gen, size, layout FROM files WHERE path = ?",
                               (current.path,)).fetchone()
            if row is None or row["layout_gen"] != current.base_layout_gen \
                    or row["size"] != current.file_size:
                raise StorageError(f"{current.path}: changed since rebuild {current.rebuild_id} "
                                   "began; abort it and start again")
            old = FileLayout.from_dict(json.loads(row["layout"]))
            replaced = _added_objects(current.new_layout, old)
            self._store_layout(conn, current.path, current.new_layout)
            conn.execute("DELETE FROM rebuilds WHERE rebuild_id = ?", (current.rebuild_id,))
            conn.execute("DELETE FROM object_intents WHERE owner = ?", (owner,))
            conn.executemany("INSERT OR REPLACE INTO object_intents(ost_index, object_id, owner) "
                             "VALUES (?, ?, ?)",
                             [(o.ost_index, o.object_id, DOOMED) for o in replaced])
        self._collect_garbage()
        log.info("store: rebuild %s of %s committed", rebuild.rebuild_id, rebuild.path)
        return replace(current.new_layout, path=current.path)

    def _sync_objects(self, objects: list[StripeObject], path: str) -> None:
        directories = set()
        for obj in objects:
            handle = self._open_object(obj, os.O_RDONLY, path)
            try:
                os.fdatasync(handle)  # the data and the size; mtime need not wait
            finally:
                os.close(handle)
            directories.add(os.path.dirname(self._object_path(obj)))
        for directory in sorted(directories):
            _fsync_dir(directory)  # and the objects' names

    def abort_rebuild(self, rebuild: Rebuild) -> None:
        self._check_writable()
        with self.db.transaction() as conn:
            self._abort_in(conn, rebuild.rebuild_id)
        self._collect_garbage()

    def _abort_in(self, conn, rebuild_id: str) -> None:
        conn.execute("DELETE FROM rebuilds WHERE rebuild_id = ?", (rebuild_id,))
        conn.execute("UPDATE object_intents SET owner = ? WHERE owner = ?",
                     (DOOMED, f"rebuild:{rebuild_id}"))

    def open_rebuilds(self) -> list[Rebuild]:
        return [Rebuild.from_dict(json.loads(row["record"]))
                for row in self.db.query("SELECT record FROM rebuilds ORDER BY rebuild_id")]


def _span(component: LayoutComponent, start: int, end: int) -> tuple[int, int]:
    """The part of ``[start, end)`` inside the component's extent (empty when ``hi <= lo``)."""
    lo = max(start, component.extent_start)
    hi = end if component.extent_end is None else min(end, component.extent_end)
    return lo, hi


def _added_objects(before: FileLayout, after: FileLayout) -> list[StripeObject]:
    """Objects ``after`` has that ``before`` does not."""
    known = {o for c in before.components for o in c.objects}
    return [o for c in after.components for o in c.objects if o not in known]


def _check_xattr_name(name: str) -> None:
    if not name.startswith(("user.", "trusted.")) or len(name.split(".", 1)[1]) == 0:
        raise InputError(f"xattr name {name!r}: expected a 'user.' or 'trusted.' name")
    if len(name) > 255:
        raise InputError(f"xattr name {name[:40]}...: longer than 255 bytes")


def _directory_bytes(directory: Path) -> int:
    total = 0
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                try:
                    total += entry.stat(follow_symlinks=False).st_blocks * 512
                except FileNotFoundError:
                    pass
    except FileNotFoundError:
        return 0
    return total


def _process_owner() -> str:
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


DIRECT_ALIGN = 4096  # O_DIRECT offsets, lengths and buffers: a multiple of any logical block
DIRECT_BUFFER = 4 << 20  # the aligned staging buffer of each writing thread
_direct_buffers = threading.local()


class _PatchWriter:
    """Writes patched bytes into one substitute object, bypassing the page cache where it can.

    A rebuild's bytes must be on disk before the layout switch anyway: written with
    ``O_DIRECT`` they stream to the disk while the next ranges are fetched, the final sync
    has only the device cache left to flush, and the rebuild takes no page cache from the
    jobs (nor pays for fresh pages). Bytes not aligned to :data:`DIRECT_ALIGN` (a file's
    last, short stripe) and file systems without ``O_DIRECT`` (tmpfs) go through the page
    cache, their writeback started at once. Bytes in memory that starts on a page boundary
    (``aligned``) are written as they are, others through a reused aligned buffer.

    ``open_object(flags)`` opens the object (and raises the store's errors).
    """

    def __init__(self, open_object):
        self.open_object = open_object
        self.buffered: int | None = None
        self.direct: int | None = None
        self.direct_refused = not hasattr(os, "O_DIRECT")
        self.span: tuple[int, int] | None = None  # object bytes written through the page cache

    def write(self, data: memoryview, object_offset: int, *, aligned: bool = False) -> None:
        if (not self.direct_refused and object_offset % DIRECT_ALIGN == 0
                and len(data) % DIRECT_ALIGN == 0):
            try:
                self._write_direct(data, object_offset, aligned)
                return
            except OSError as err:
                if err.errno != errno.EINVAL:
                    raise
                log.info("store: O_DIRECT refused (%s); patching through the page cache",
                         err.strerror)
                self.direct_refused = True
        if self.buffered is None:
            self.buffered = self.open_object(os.O_WRONLY)
        pwrite_all(self.buffered, data, object_offset)
        low, high = self.span or (object_offset, object_offset)
        self.span = (min(low, object_offset), max(high, object_offset + len(data)))

    def _write_direct(self, data: memoryview, object_offset: int, aligned: bool) -> None:
        if self.direct is None:
            self.direct = self.open_object(os.O_WRONLY | os.O_DIRECT)
        if aligned:
            pwrite_all(self.direct, data, object_offset)
            return
        buffer = getattr(_direct_buffers, "buffer", None)
        if buffer is None:  # page-aligned, and reused: no fresh pages per write
            buffer = _direct_buffers.buffer = mmap.mmap(-1, DIRECT_BUFFER)
        staging = memoryview(buffer)
        try:
            done = 0
            while done < len(data):
                count = min(DIRECT_BUFFER, len(data) - done)
                staging[:count] = data[done:done + count]
                pwrite_all(self.direct, staging[:count], object_offset + done)
                done += count
        finally:
            staging.release()

    def start_writeback(self) -> None:
        if self.buffered is not None and self.span is not None:
            _start_writeback(self.buffered, self.span[0], self.span[1] - self.span[0])

    def close(self) -> None:
        for handle in (self.buffered, self.direct):
            if handle is not None:
                os.close(handle)
        self.buffered = self.direct = None


def _start_writeback(handle: int, offset: int, length: int) -> None:
    """Start writing bytes just written back without waiting (the sync later waits less)."""
    if length <= 0:
        return
    try:
        # on Linux, POSIX_FADV_DONTNEED starts writeback of the range's dirty pages
        # (WB_SYNC_NONE) and drops only the clean ones; a hint: without it the sync waits more
        os.posix_fadvise(handle, offset, length, os.POSIX_FADV_DONTNEED)
    except (AttributeError, OSError):
        pass


def _make_dir(directory: Path, *, parents: bool = False) -> None:
    """Create a store directory, 0755 whatever the umask: users traverse it to their objects."""
    try:
        directory.mkdir(parents=parents)
    except FileExistsError:
        return
    os.chmod(directory, 0o755)


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return statmod.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _unlink_imported(parent_fd: int, name: str, info: os.stat_result, full: str) -> None:
    """Unlink the imported POSIX file by its name in the directory it was opened in, unless the
    name now holds another file (that one is left alone); then sync the directory."""
    try:
        now = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino):
        log.warning("store: %s was replaced while it was imported; the new file is left "
                    "in place", full)
        return
    os.unlink(name, dir_fd=parent_fd)
    os.fsync(parent_fd)


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
