"""The local store as a file system: :class:`LocalStripedStore` (OSTs, allocation,
create/put/import, reads and writes, extended attributes), built from the mixins of its sibling
modules (the package docstring says which does what).

Failing an OST renames its directory to ``ostNNNN.failed``: its objects really cannot be
opened, as on a dead OSS, until ``restore_ost`` puts it back.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import posixpath
import stat as statmod
import threading
import time
from dataclasses import replace
from pathlib import Path

from ...errors import InputError, PermissionDenied, StateError, StorageError, TargetUnavailable
from ...state import StateStore
from ..base import (
    OST_ACTIVE,
    OST_FAILED,
    OST_UNREACHABLE,
    FileStat,
    OstStatus,
    StorageBackend,
    check_xattr_name,
    xattr_name_listed,
)
from ..layout import (
    DIRLOV_XATTR,
    LOV_XATTR,
    DirDefault,
    FileLayout,
    LayoutComponent,
    LayoutRequest,
    StripeObject,
)
from ..sources import open_regular, space_errors
from .mdt import REMOVED, Inode, MdtMixin
from .mirrors import MirrorsMixin
from .namespace import NamespaceMixin
from .objects import (
    ObjectsMixin,
    ObjectWrite,
    directory_bytes,
    fsync_dir,
    in_sync,
    is_link,
    unlink_imported,
)
from .placement import PLACEMENTS, PlacementMixin
from .processes import process_owner
from .rebuild import RebuildMixin
from .users import UsersMixin

# log lines carry the package's name (scratchkeeper.storage.local), the one its users know
log = logging.getLogger(__package__)

XATTR_MAX = 65536


class LocalStripedStore(NamespaceMixin, MdtMixin, ObjectsMixin, RebuildMixin, PlacementMixin,
                        MirrorsMixin, UsersMixin, StorageBackend):
    """Striped object store in a local directory, behaving like a Lustre file system.

    The MDT is :mod:`.mdt`, the database of intents and rebuilds and the garbage
    collection :mod:`.namespace`, the object files :mod:`.objects`, the rebuild of
    lost stripes :mod:`.rebuild`, the choice of OSTs :mod:`.placement`, the mirrors
    :mod:`.mirrors`, other users' reads through the scratch mount :mod:`.users`;
    this class is the file system on top. ``placement``: ``"least-loaded"`` or ``"suora"``;
    ``tiers``: ``[(performance class, [pool, ...]), ...]`` slowest first
    (``config.tier_pools``).
    """

    def __init__(self, scratch_root: str, store_root: str, *, ost_count: int,
                 default_stripe_count: int = 4, default_stripe_size: int = 1 << 20,
                 pools: dict[str, tuple[int, ...]] | None = None,
                 placement: str = "least-loaded",
                 tiers: list[tuple[str, list[str]]] | None = None):
        super().__init__(scratch_root, default_stripe_count=default_stripe_count,
                         default_stripe_size=default_stripe_size)
        self.store_root = Path(store_root)
        self.ost_count = ost_count
        self.pools = dict(pools or {})
        if placement not in PLACEMENTS:
            raise InputError(f"placement {placement!r}: expected one of {', '.join(PLACEMENTS)}")
        self.placement = placement
        self.tiers = [(tier, list(names)) for tier, names in tiers or ()]
        unknown = [name for _, names in self.tiers for name in names if name not in self.pools]
        if unknown:
            raise InputError(f"tiers name pools that do not exist: {unknown}")
        self._db: StateStore | None = None
        self._map_cache: dict = {}  # pool -> (built at, OST states, SUORA map): place_new_file
        self._ready_lock = threading.Lock()
        self._read_only = False  # set on open: this process may not write the namespace
        self._through_mount = False  # set on open: another user's process, reading the mount
        self._owner_uid: int | None = None

    # -- OSTs ----------------------------------------------------------------------------------
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
            # the bytes its objects take: counted in its directory, which only the owner reads
            used = None if self._through_mount else directory_bytes(self._ost_dir(index))
            result.append(OstStatus(index, name, states[index], total, used, available))
        return result

    def _probe_ost(self, ost: OstStatus, timeout: float) -> OstStatus:
        """Write, read back and delete a small probe object, as an OST ping touches the disk.

        A process that opened the store read-only may not write there: it lists the OST; one
        reading through the scratch mount, which may not list it, looks for its name.
        """
        directory = self._ost_dir(ost.ost_index)
        if self.through_mount:
            state = self._ost_states_by_name().get(ost.ost_index)
            return replace(ost, state=state or OST_FAILED,
                           detail="" if state == OST_ACTIVE else "no such OST directory")
        if self.read_only:
            try:
                with os.scandir(directory) as entries:
                    next(entries, None)
            except OSError as err:
                return replace(ost, state=OST_FAILED if not directory.exists() else
                               OST_UNREACHABLE, detail=err.strerror or str(err))
            return replace(ost, state=OST_ACTIVE, detail="")
        name = f".probe-{os.getpid()}-{threading.get_ident()}"
        token = os.urandom(16)
        try:
            # plain descriptors: a probe of every OST is on recovery's path, and pathlib's
            # buffered files cost more than the create, write, read and unlink themselves
            parent = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o600, dir_fd=parent)
                try:
                    os.write(fd, token)
                    answer = os.pread(fd, len(token) + 1, 0)
                finally:
                    os.close(fd)
                os.unlink(name, dir_fd=parent)
            finally:
                os.close(parent)
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
        self._sweep_doomed(ost_index)
        self._collect_garbage()

    # -- files: create, put, import ------------------------------------------------------------
    def create(self, path: str, request: LayoutRequest = LayoutRequest(), *,
               owner: tuple[int, int] | None = None, mode: int = 0o644) -> FileLayout:
        full = self._new_path(path)
        uid, gid = owner if owner is not None else (os.getuid(), os.getgid())
        component, marks = self._new_component(self._with_default(full, request))
        return self._store_new(full, component, uid=uid, gid=gid, mode=mode,
                               mtime_ns=time.time_ns(), xattrs=marks)

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
        component, marks = self._new_component(self._with_default(full, request))
        return self._store_new(full, component, uid=uid, gid=gid, mode=mode,
                               mtime_ns=time.time_ns(), source=(source_fd, size, label or full),
                               xattrs=marks)

    def _new_path(self, path: str) -> str:
        self._check_writable()
        full = self.paths.resolve(path)
        if full == self.scratch_root:
            raise InputError(f"{full}: is the scratch root, not a file")
        if self._mdt_entry(full) is not None:
            raise InputError(f"{full}: already exists in the store")
        return full

    def _with_default(self, full: str, request: LayoutRequest) -> LayoutRequest:
        """``request`` with what it leaves open taken from the directory's default layout
        (``lfs setstripe DIR``), else the site's."""
        default = self._dir_default(full)
        if default is None or request.ost_list is not None:
            return request
        return LayoutRequest(
            stripe_count=default.stripe_count if request.stripe_count is None
            else request.stripe_count,
            stripe_size=default.stripe_size if request.stripe_size is None
            else request.stripe_size,
            pool=default.pool if request.pool is None else request.pool)

    def _store_new(self, full: str, component: LayoutComponent, *, uid: int, gid: int,
                   mode: int, mtime_ns: int, source: tuple[int, int, str] | None = None,
                   replaces: bool = False, xattrs: dict[str, bytes] | None = None
                   ) -> FileLayout:
        """Create a file: its objects under an intent, filled from ``source`` (descriptor,
        size, name for errors) and synced; its inode prepared and synced in the staging
        directory; the intents marked committing; the inode linked into the MDT (renamed
        over the store file it ``replaces``, whose objects are then doomed); the intents
        released. A failure before the link drops the objects: nothing is committed."""
        layout = FileLayout((component,), 0, full)
        size = source[1] if source else 0
        claim = process_owner()
        self._claim_objects(component.objects, claim)
        staged, linked, removed = None, [], None
        try:
            with space_errors(full):
                self._create_objects(component.objects, uid=uid, gid=gid)
                if source:
                    self._copy_in(source[0], size, component, source[2])
                for directory in sorted({str(self._ost_dir(o.ost_index))
                                         for o in component.objects}):
                    fsync_dir(directory)  # the objects' names, before an inode names them
                staged = self._stage_inode(layout, size=size, uid=uid, gid=gid, mode=mode,
                                           mtime_ns=mtime_ns, xattrs=xattrs)
            self._mark_committing(component.objects, claim, full,
                                  os.lstat(self.staging_root / staged).st_ino)

            with self.db.transaction() as conn:
                with space_errors(full):
                    old, removed = self._link_staged(staged, full, (uid, gid),
                                                     replace_old=_any_file if replaces else None,
                                                     on_linked=lambda: linked.append(True))
                if old is not None:
                    self._doom_file_in(conn, full, old.layout if old.st.st_nlink == 1 else None)
                self._release_claim(conn, component.objects, claim)
            if removed is not None:
                self._unstage(removed)
        except BaseException as err:
            if not linked:
                if staged is not None:
                    self._unstage(staged)
                self._drop_objects(component.objects, claim)
                raise
            if not isinstance(err, StateError):
                raise  # linked, but not known to be durable: an error, the objects kept
            # committed: the intents stay committing, for the collector to release
            log.warning("store: %s committed; its intents are left for the collector (%s)",
                        full, err)
        return layout

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
                existing = self._lookup(full)
                if existing and _served_by_mount(fd, info, existing.st):
                    # the transfer wrote through the scratch mount (docs/mount.rst): the file
                    # already is this store file, with the layout its directory gave it
                    log.info("store: %s was written through the scratch mount; already in the "
                             "store", full)
                    return existing.layout
                if existing:
                    if existing.size == info.st_size and \
                            existing.st.st_mtime == info.st_mtime:
                        # the earlier import committed, then died before this
                        unlink_imported(parent_fd, name, info, full)
                        return self.layout(full)
                # an empty file laid out before the transfer (``store setstripe --file``, as
                # lfs setstripe on Lustre) is there to be written over: the data takes its
                # stripe count and size
                placeholder = bool(existing) and existing.size == 0
                if existing and not replace and not placeholder:
                    raise InputError(f"{full}: a different file already exists in the store")
                if placeholder and stripe_count is None and stripe_size is None:
                    stripe_count = existing.layout.stripe_count
                    stripe_size = existing.layout.stripe_size
                request = LayoutRequest(stripe_count=stripe_count, stripe_size=stripe_size)
                component, marks = self._new_component(self._with_default(full, request))
                uid, gid = owner if owner is not None else (info.st_uid, info.st_gid)
                layout = self._store_new(full, component, uid=uid, gid=gid,
                                         mode=statmod.S_IMODE(info.st_mode),
                                         mtime_ns=info.st_mtime_ns,
                                         source=(fd, info.st_size, full),
                                         replaces=replace or placeholder, xattrs=marks)
            finally:
                os.close(fd)
            unlink_imported(parent_fd, name, info, full)
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
                    if is_link(component, fd):
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

    # -- namespace -----------------------------------------------------------------------------
    def layout(self, path: str) -> FileLayout:
        return self._inode(path).layout

    def file_id(self, path: str) -> int:
        """The file's MDT inode number: its identity across renames (the read records' key)."""
        return self._inode(path).st.st_ino

    def stat(self, path: str) -> FileStat:
        node = self._inode(path)
        return FileStat(node.path, node.size, node.st.st_uid, node.st.st_gid,
                        statmod.S_IMODE(node.st.st_mode), node.st.st_mtime)

    def exists(self, path: str) -> bool:
        entry = self._mdt_entry(self.paths.resolve(path))
        return entry is not None and statmod.S_ISREG(entry.st_mode)

    def remove(self, path: str) -> None:
        """Unlink the file's MDT name; its objects are doomed when that was its last name.

        A file the scratch mount serves is unlinked through the mount instead: the kernel then
        forgets the name at once (not after the mount's entry timeout), and the mount deletes
        the objects when the last name and the last open handle are gone (a job may still be
        reading it)."""
        self._check_writable()
        if self._remove_through_mount(path):
            return
        with self._opened(path) as node:
            now = os.fstat(node.fd)
            # the name goes into the staging directory first: a crash from here on leaves an
            # entry the collector finishes (its objects doomed when it was the last name)
            staged = self._move_to_staging(node, REMOVED)
            with self.db.transaction() as conn:
                self._doom_file_in(conn, node.path, node.layout if now.st_nlink == 1 else None)
        self._unstage(staged)
        self._collect_garbage()

    def _remove_through_mount(self, path: str) -> bool:
        node = self._lookup(self.paths.resolve(path))
        if node is None:
            return False
        try:
            parent_fd, name = self._open_parent(node.path)
        except (InputError, PermissionDenied, StorageError):
            return False  # no such name under the real scratch root: not mounted
        try:
            try:
                fd = os.open(name, os.O_PATH | os.O_NOFOLLOW, dir_fd=parent_fd)
            except OSError:
                return False
            try:
                # an O_PATH descriptor has no xattrs: ask the name in the directory walked,
                # never following a link
                served = _served_by_mount(None, os.fstat(fd), node.st, lambda: os.getxattr(
                    f"/proc/self/fd/{parent_fd}/{name}", LOV_XATTR, follow_symlinks=False))
            finally:
                os.close(fd)
            if served:
                os.unlink(name, dir_fd=parent_fd)
            return served
        finally:
            os.close(parent_fd)

    def list_dir(self, path: str = "") -> list[str]:
        full = self.paths.resolve(path or self.scratch_root)
        entry = self._mdt_entry(full)
        if entry is None:
            return []
        if not statmod.S_ISDIR(entry.st_mode):
            return [posixpath.basename(full)]
        if full == self.scratch_root:
            root = self._open_mdt_root(full)
            try:
                directory = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC,
                                    dir_fd=root)
            except PermissionError:
                raise PermissionDenied(f"{full}: permission denied (uid {os.geteuid()} may not "
                                       "list it)") from None
            finally:
                os.close(root)
        else:
            parent_fd, name = self._walk_parent(full)
            try:
                directory = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW |
                                    os.O_CLOEXEC, dir_fd=parent_fd)
            except PermissionError:
                raise PermissionDenied(f"{full}: permission denied (uid {os.geteuid()} may not "
                                       "list it)") from None
            finally:
                os.close(parent_fd)
        try:
            with os.scandir(directory) as entries:
                return sorted(e.name + ("/" if e.is_dir(follow_symlinks=False) else "")
                              for e in entries)
        finally:
            os.close(directory)

    def files_on_ost(self, ost_index: int) -> list[str]:
        """Every file whose layout has an object on the OST: the MDT walked, each layout read
        (``lfs find --ost``). A file whose layout is corrupt is logged and passed over."""
        self._check_ost_index(ost_index)
        self._ensure_open()  # the store opened (and migrated) first
        found = []
        for full, mdt_path in self._walk_files():
            try:
                data = os.getxattr(mdt_path, LOV_XATTR, follow_symlinks=False)
            except OSError:
                continue  # no layout (not a store file), or gone meanwhile
            try:
                layout = FileLayout.from_lov(data, full)
            except StorageError as err:
                log.error("store %s: %s", self.store_root, err)
                continue
            if ost_index in layout.osts():
                found.append(full)
        return sorted(found)

    def set_default_layout(self, path: str, default: DirDefault) -> None:
        """A directory's default layout (``lfs setstripe DIR``), the directory made (owned by
        this process's user, 0755) when missing; new files and directories in it take it."""
        self._check_writable()
        full = self.paths.resolve(path or self.scratch_root)
        LayoutRequest(stripe_count=default.stripe_count, stripe_size=default.stripe_size).check()
        if default.pool is not None and default.pool not in self.pools:
            raise InputError(f"pool {default.pool!r}: no such pool (known: "
                             f"{', '.join(sorted(self.pools)) or 'none'})")
        value = default.to_xattr()
        with self.db.transaction():
            if full == self.scratch_root:
                os.setxattr(self.mdt_root, DIRLOV_XATTR, value)
                return
            parent_fd, name = self._walk_parent(full, create=(os.getuid(), os.getgid()))
            try:
                entry = self._mdt_entry(full)
                if entry is None:
                    os.close(self._make_dir_in(parent_fd, name, (os.getuid(), os.getgid()),
                                               full))
                elif not statmod.S_ISDIR(entry.st_mode):
                    raise InputError(f"{full}: is not a directory")
                fd = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                             dir_fd=parent_fd)
                try:
                    os.setxattr(f"/proc/self/fd/{fd}", DIRLOV_XATTR, value)
                finally:
                    os.close(fd)
            finally:
                os.close(parent_fd)

    def is_dir(self, path: str) -> bool:
        """Whether ``path`` is a directory of the store's namespace."""
        entry = self._mdt_entry(self.paths.resolve(path or self.scratch_root))
        return entry is not None and statmod.S_ISDIR(entry.st_mode)

    def default_layout(self, path: str) -> DirDefault | None:
        """The default layout of a store directory (None: the site's applies)."""
        full = self.paths.resolve(path or self.scratch_root)
        entry = self._mdt_entry(full)
        if entry is None or not statmod.S_ISDIR(entry.st_mode):
            raise InputError(f"{full}: no such directory in the store")
        return self._dir_default(posixpath.join(full, "x"))

    # -- data ----------------------------------------------------------------------------------
    def read(self, path: str, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise InputError(f"{path}: negative offset or length")
        if not self.through_mount:
            node = self._inode(path)
            return self._read_through(node.layout, node.size, offset, length, self._healthy())
        with self._opened(path) as node:
            end = min(node.size, offset + length)
            if end <= offset:
                return b""
            # a stripe no mirror serves is TargetUnavailable, as below (the mount would wait
            # for recoveryd instead): the caller knows which OST and may ask recovery itself
            for _ in self._served_pieces(node.layout, offset, end, self._healthy()):
                pass
            try:
                return self._read_mounted(node, offset, end)
            except StorageError:
                # an OST failed meanwhile and the mount gave up on it: say which one
                for _ in self._served_pieces(node.layout, offset, end, self._healthy()):
                    pass
                raise

    def _read_through(self, layout: FileLayout, size: int, offset: int, length: int,
                      healthy: set[int]) -> bytes:
        """Read ``[offset, offset+length)`` of a file of ``size`` bytes through ``layout``."""
        end = min(size, offset + length)
        if end <= offset:
            return b""
        out = bytearray()
        handles: dict[StripeObject, int] = {}
        try:
            for piece, obj in self._served_pieces(layout, offset, end, healthy):
                handle = handles.get(obj)
                if handle is None:
                    handle = handles[obj] = self._open_object(obj, os.O_RDONLY, layout.path)
                data = os.pread(handle, piece.length, piece.object_offset)
                out += data
                if len(data) < piece.length:  # a hole the writer never filled reads as zeros
                    out += bytes(piece.length - len(data))
        finally:
            for handle in handles.values():
                os.close(handle)
        return bytes(out)

    def _served_pieces(self, layout: FileLayout, offset: int, end: int, healthy: set[int]):
        """``(piece, object)`` of ``[offset, end)`` in order, one stripe piece at a time, each
        from whichever mirror can serve it; :class:`TargetUnavailable` at the first piece no
        mirror on a healthy OST holds."""
        position = offset
        while position < end:
            component = self._serving_component(layout, position, healthy)
            stop = end if component.extent_end is None else min(end, component.extent_end)
            piece = next(component.pieces(position, stop - position))
            obj = component.objects[piece.position]
            if obj.ost_index not in healthy:
                raise TargetUnavailable(f"{layout.path}: OST {obj.ost_index} is unavailable "
                                        f"(byte {piece.file_offset})",
                                        ost_index=obj.ost_index, path=layout.path)
            yield piece, obj
            position += piece.length

    @staticmethod
    def _serving_component(layout: FileLayout, offset: int, healthy: set[int]) -> LayoutComponent:
        """The in-sync component (of whichever mirror) whose stripe at ``offset`` is on a
        healthy OST; a stale mirror (one the scratch mount could not change) is never read."""
        covering = [c for c in layout.components if c.covers(offset) and in_sync(c)]
        if not covering:
            raise StorageError(f"{layout.path}: no in-sync component covers byte {offset}")
        for comp in covering:
            if comp.objects[comp.position_of(offset)].ost_index in healthy:
                return comp
        return covering[0]

    def write(self, path: str, offset: int, data: bytes) -> None:
        """Write ``data`` at ``offset`` to every in-sync mirror, all or nothing: an object that
        cannot be reached, a piece that fails or a full file system changes no byte
        (:class:`ObjectWrite`); the MDT inode grows last."""
        self._check_writable()
        if offset < 0:
            raise InputError(f"{path}: negative offset")
        with self._opened(path) as node:
            layout = node.layout
            with ObjectWrite(self, layout, self._healthy()) as change, \
                    space_errors(layout.path):
                change.write(offset, data, node.size)
                try:
                    with self.db.transaction():  # two writers growing a file: the larger stays
                        now = os.fstat(node.fd)
                        if offset + len(data) > now.st_size:
                            os.truncate(node.proc, offset + len(data))
                        os.utime(node.proc, ns=(now.st_atime_ns, time.time_ns()))
                except BaseException:
                    change.undo()
                    raise

    # -- extended attributes -------------------------------------------------------------------
    def set_xattr(self, path: str, name: str, value: bytes) -> None:
        self.set_xattrs(path, {name: value})

    def set_xattrs(self, path: str, values: dict[str, bytes]) -> None:
        """Set several attributes of the MDT inode: all of them or, on an error, none (the
        ones set already are put back)."""
        self._check_writable()
        for name, value in values.items():
            check_xattr_name(name)
            if len(value) > XATTR_MAX:
                raise InputError(f"{path}: xattr {name} value is {len(value)} bytes, over the "
                                 f"{XATTR_MAX}-byte limit")
        with self._opened(path) as node:
            done: list[tuple[str, bytes | None]] = []
            try:
                for name, value in values.items():
                    done.append((name, _getxattr(node, name)))
                    try:
                        os.setxattr(node.proc, name, bytes(value))
                    except OSError as err:
                        raise StorageError(f"{node.path}: cannot set xattr {name} "
                                           f"({len(value)} bytes): {err.strerror}") from None
            except BaseException:
                for name, previous in reversed(done):
                    with contextlib.suppress(OSError):
                        if previous is None:
                            os.removexattr(node.proc, name)
                        else:
                            os.setxattr(node.proc, name, previous)
                raise

    def get_xattr(self, path: str, name: str) -> bytes | None:
        check_xattr_name(name)
        with self._opened(path) as node:
            return _getxattr(node, name)

    def list_xattrs(self, path: str) -> dict[str, bytes]:
        with self._opened(path) as node:
            try:
                names = os.listxattr(node.proc)
            except PermissionError:
                raise PermissionDenied(f"{node.path}: permission denied (uid {os.geteuid()} "
                                       "may not read its attributes)") from None
            # trusted.* are root's (CAP_SYS_ADMIN): another process has none to list
            privileged = os.geteuid() == 0
            values = {name: _getxattr(node, name) for name in sorted(names)
                      if xattr_name_listed(name)
                      and (privileged or not name.startswith("trusted."))}
            return {name: value for name, value in values.items() if value is not None}

    def remove_xattr(self, path: str, name: str) -> None:
        self._check_writable()
        check_xattr_name(name)
        with self._opened(path) as node:
            try:
                os.removexattr(node.proc, name)
            except OSError as err:
                if err.errno != errno.ENODATA:
                    raise StorageError(f"{node.path}: cannot remove xattr {name}: "
                                       f"{err.strerror}") from None


def _any_file(old: Inode) -> None:
    """Any store file may be replaced (``import_file(replace=True)``)."""


def _getxattr(node: Inode, name: str) -> bytes | None:
    try:
        return os.getxattr(node.proc, name)
    except OSError as err:
        if err.errno == errno.ENODATA:
            return None
        if err.errno in (errno.EACCES, errno.EPERM):
            raise PermissionDenied(f"{node.path}: permission denied (uid {os.geteuid()} may not "
                                   f"read its attribute {name})") from None
        raise StorageError(f"{node.path}: cannot read xattr {name}: {err.strerror}") from None


def _served_by_mount(fd: int | None, opened: os.stat_result, mdt: os.stat_result,
                     layout_of=None) -> bool:
    """Whether the file opened under the scratch root is the MDT inode ``mdt`` served by the
    scratch mount: the mount answers with the MDT's inode number, on a device of its own, and
    shows the layout attribute only root can set (read from ``fd``, or by ``layout_of()``)."""
    if (opened.st_ino, opened.st_size) != (mdt.st_ino, mdt.st_size) or \
            opened.st_dev == mdt.st_dev:
        return False
    try:
        layout_of() if layout_of is not None else os.getxattr(fd, LOV_XATTR)
    except OSError:
        return False
    return True
