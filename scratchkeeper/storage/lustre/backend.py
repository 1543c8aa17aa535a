"""The Lustre backend: layouts, mirrors and OST health through ``lfs``/``lctl``, data through POSIX.

``scratch_root`` is the Lustre mount (or a directory in it). Every command goes through
:mod:`scratchkeeper.runner` with a timeout; output is parsed by :mod:`.lfs`. Reading a byte
whose stripe is on a dead OST fails with EIO (fail-out mode, the thesis's §4.6.2); the offset is
mapped back to the OST through the layout so :class:`TargetUnavailable` names it.

Rebuilding lost stripes uses a temporary file in the same directory created with the
substitute OST list (``lfs setstripe -o``): the surviving ranges are copied into it, recovery
patches the lost ranges, and ``lfs swap_layouts`` switches the two layouts atomically. The
in-flight rebuilds are journalled in the state database (component ``storage-lustre``).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import posixpath
import stat as statmod
import uuid
from dataclasses import replace

from ...errors import (
    CommandError,
    CommandTimeout,
    InputError,
    PermissionDenied,
    ScratchkeeperError,
    StorageError,
    TargetUnavailable,
)
from ...runner import get_runner
from ...state import StateStore
from ..base import (
    OST_ACTIVE,
    OST_UNREACHABLE,
    FileStat,
    OstStatus,
    Rebuild,
    StorageBackend,
    check_xattr_name,
    pwrite_all,
    substitute_layout,
    xattr_name_listed,
)
from ..layout import Extent, FileLayout, LayoutRequest, merge_extents, subtract_extents
from . import lfs as lfs_cmd

# log lines carry the package's name (scratchkeeper.storage.lustre), the one its users know
log = logging.getLogger(__package__)

COMPONENT = "storage-lustre"
MIGRATIONS = [
    """
    CREATE TABLE lustre_rebuilds (
        rebuild_id TEXT PRIMARY KEY,
        path TEXT NOT NULL,
        temp_path TEXT NOT NULL,
        record TEXT NOT NULL
    );
    """,
]
COPY_CHUNK = 4 << 20


class LustreBackend(StorageBackend):
    """Drives a mounted Lustre file system with ``lfs``; tested on captured output only."""

    name = "lustre"

    def __init__(self, scratch_root: str, *, lfs: str = "lfs", lctl: str = "lctl",
                 state_database: str, default_stripe_count: int = 4,
                 default_stripe_size: int = 1 << 20, command_timeout: float = 60.0):
        super().__init__(scratch_root, default_stripe_count=default_stripe_count,
                         default_stripe_size=default_stripe_size)
        self.lfs = lfs
        self.lctl = lctl
        self.command_timeout = command_timeout
        self.state_database = state_database
        self._journal: StateStore | None = None
        self._fsname: str | None = None

    # -- plumbing ------------------------------------------------------------------------------
    def _run(self, argv: list[str], *, mutating: bool, timeout: float | None = None) -> str:
        try:
            return get_runner().run(argv, timeout=timeout or self.command_timeout,
                                    mutating=mutating).stdout
        except CommandTimeout:
            raise
        except CommandError as err:
            raise StorageError(f"{' '.join(argv[:2])} failed: "
                               f"{(err.stderr or err.stdout or str(err)).strip()}") from err

    @property
    def journal(self) -> StateStore:
        if self._journal is None:
            store = StateStore(self.state_database)
            store.ensure_schema(COMPONENT, MIGRATIONS)
            self._journal = store
        return self._journal

    def _file(self, path: str) -> str:
        """The resolved path of an existing regular file that stays inside the scratch root."""
        full = self.paths.resolve(path)
        real_root = os.path.realpath(self.scratch_root)
        real = os.path.realpath(full)
        if real != real_root and not real.startswith(real_root.rstrip("/") + "/"):
            raise InputError(f"{full}: leads outside the scratch root through a symbolic link")
        try:
            info = os.lstat(full)
        except FileNotFoundError:
            raise InputError(f"{full}: no such file") from None
        if not statmod.S_ISREG(info.st_mode):
            raise InputError(f"{full}: not a regular file")
        return full

    # -- namespace -----------------------------------------------------------------------------
    def create(self, path: str, request: LayoutRequest = LayoutRequest(), *,
               owner: tuple[int, int] | None = None, mode: int = 0o644) -> FileLayout:
        request.check()
        full = self.paths.resolve(path)
        if os.path.lexists(full):
            raise InputError(f"{full}: already exists")
        self._make_parents(full)
        self._run(lfs_cmd.setstripe_argv(self.lfs, full, request,
                                         default_count=self.default_stripe_count,
                                         default_size=self.default_stripe_size), mutating=True)
        os.chmod(full, mode)
        if owner is not None:
            os.chown(full, *owner)
        return self.layout(full)

    def _make_parents(self, full: str) -> None:
        """Create the file's directories, refusing a symbolic link that leads out of the root."""
        parent = posixpath.dirname(full)
        os.makedirs(parent, exist_ok=True)
        real_root = os.path.realpath(self.scratch_root)
        real = os.path.realpath(parent)
        if real != real_root and not real.startswith(real_root.rstrip("/") + "/"):
            raise InputError(f"{full}: its directory leads outside the scratch root {real_root}")

    def import_file(self, path: str, *, stripe_count: int | None = None,
                    stripe_size: int | None = None,
                    owner: tuple[int, int] | None = None, replace: bool = False,
                    expect_uid: int | None = None) -> FileLayout:
        """The transfer wrote straight into Lustre: only ownership is fixed, the layout returned.

        ``replace`` changes nothing here: the transfer itself already overwrote the file.
        """
        full = self._file(path)
        if expect_uid is not None:
            found = os.lstat(full).st_uid
            if found != expect_uid:
                raise PermissionDenied(f"{full}: owned by uid {found}, not by uid {expect_uid}")
        if owner is not None:
            os.chown(full, *owner, follow_symlinks=False)
        return self.layout(full)

    def layout(self, path: str) -> FileLayout:
        full = self._file(path)
        text = self._run(lfs_cmd.getstripe_argv(self.lfs, full), mutating=False)
        return lfs_cmd.parse_getstripe_yaml(text, full)

    def stat(self, path: str) -> FileStat:
        full = self._file(path)
        info = os.stat(full)
        return FileStat(full, info.st_size, info.st_uid, info.st_gid,
                        statmod.S_IMODE(info.st_mode), info.st_mtime)

    def exists(self, path: str) -> bool:
        full = self.paths.resolve(path)
        return os.path.isfile(full) and not os.path.islink(full)

    def remove(self, path: str) -> None:
        full = self._file(path)
        for row in self.journal.query("SELECT rebuild_id FROM lustre_rebuilds WHERE path = ?",
                                      (full,)):
            self._abort(row["rebuild_id"])
        os.unlink(full)

    def list_dir(self, path: str = "") -> list[str]:
        full = self.paths.resolve(path or self.scratch_root)
        if os.path.isfile(full):
            return [os.path.basename(full)]
        try:
            entries = list(os.scandir(full))
        except FileNotFoundError:
            raise InputError(f"{full}: no such directory") from None
        return sorted(e.name + ("/" if e.is_dir(follow_symlinks=False) else "") for e in entries)

    def files_on_ost(self, ost_index: int) -> list[str]:
        text = self._run(lfs_cmd.find_ost_argv(self.lfs, self.scratch_root, ost_index),
                         mutating=False)
        return sorted(lfs_cmd.parse_find_print0(text))

    # -- data ----------------------------------------------------------------------------------
    def read(self, path: str, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise InputError(f"{path}: negative offset or length")
        full = self._file(path)
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            out = bytearray()
            while len(out) < length:
                try:
                    data = os.pread(fd, length - len(out), offset + len(out))
                except OSError as err:
                    raise self._io_error(full, offset + len(out), err) from err
                if not data:
                    break
                out += data
            return bytes(out)
        finally:
            os.close(fd)

    def _io_error(self, full: str, offset: int, err: OSError) -> StorageError:
        """Name the OST behind an I/O error, as the client in the thesis's §4.6.2 does."""
        if err.errno not in (errno.EIO, errno.ENODEV, errno.ESHUTDOWN, errno.ETIMEDOUT):
            return StorageError(f"{full}: byte {offset}: {err.strerror}")
        component = self.layout(full).component_at(offset)
        ost = None
        if component is not None and component.objects:
            ost = component.objects[component.position_of(offset)].ost_index
        return TargetUnavailable(f"{full}: byte {offset}: {err.strerror} (OST {ost})",
                                 ost_index=ost, path=full)

    def write(self, path: str, offset: int, data: bytes) -> None:
        if offset < 0:
            raise InputError(f"{path}: negative offset")
        full = self._file(path)
        fd = os.open(full, os.O_WRONLY | os.O_NOFOLLOW)
        try:
            written = 0
            while written < len(data):
                try:
                    written += os.pwrite(fd, data[written:], offset + written)
                except OSError as err:
                    raise self._io_error(full, offset + written, err) from err
        finally:
            os.close(fd)

    # -- extended attributes -------------------------------------------------------------------
    def set_xattr(self, path: str, name: str, value: bytes) -> None:
        check_xattr_name(name)
        full = self._file(path)
        try:
            os.setxattr(full, name, value, follow_symlinks=False)
        except OSError as err:
            raise _xattr_error(full, name, err) from err

    def get_xattr(self, path: str, name: str) -> bytes | None:
        check_xattr_name(name)
        full = self._file(path)
        try:
            return os.getxattr(full, name, follow_symlinks=False)
        except OSError as err:
            if err.errno == errno.ENODATA:
                return None
            raise _xattr_error(full, name, err) from err

    def list_xattrs(self, path: str) -> dict[str, bytes]:
        full = self._file(path)
        names = [n for n in os.listxattr(full, follow_symlinks=False) if xattr_name_listed(n)]
        return {n: os.getxattr(full, n, follow_symlinks=False) for n in sorted(names)}

    def remove_xattr(self, path: str, name: str) -> None:
        check_xattr_name(name)
        full = self._file(path)
        try:
            os.removexattr(full, name, follow_symlinks=False)
        except OSError as err:
            if err.errno != errno.ENODATA:
                raise _xattr_error(full, name, err) from err

    # -- OSTs ----------------------------------------------------------------------------------
    def list_osts(self) -> list[OstStatus]:
        text = self._run(lfs_cmd.df_argv(self.lfs, self.scratch_root), mutating=False)
        osts = lfs_cmd.parse_df(text)
        if not osts:
            raise StorageError(f"{self.scratch_root}: lfs df lists no OST; is Lustre mounted?")
        self._fsname = lfs_cmd.fsname_of(osts) or self._fsname
        return osts

    def _probe_ost(self, ost: OstStatus, timeout: float) -> OstStatus:
        if self._fsname is None:
            raise StorageError("file system name unknown: list_osts first")
        try:
            get_runner().run(lfs_cmd.ping_argv(self.lctl, self._fsname, ost.ost_index),
                             timeout=timeout, mutating=False)
        except CommandTimeout:
            return replace(ost, state=OST_UNREACHABLE, detail=f"ping timed out after {timeout:g}s")
        except CommandError as err:
            return replace(ost, state=OST_UNREACHABLE,
                           detail=(err.stderr or str(err)).strip().splitlines()[-1:][0]
                           if (err.stderr or str(err)).strip() else "ping failed")
        return replace(ost, state=OST_ACTIVE, detail="")

    def drop_cache(self, path: str) -> None:
        full = self._file(path)
        self._run(lfs_cmd.ladvise_dontneed_argv(self.lfs, full, os.stat(full).st_size),
                  mutating=False)

    # -- mirrors -------------------------------------------------------------------------------
    def add_mirror(self, path: str, request: LayoutRequest = LayoutRequest()) -> FileLayout:
        request.check()
        full = self._file(path)
        before = self.layout(full)
        if request.ost_list is not None and set(request.ost_list) & before.osts():
            raise InputError(f"{full}: OSTs {sorted(set(request.ost_list) & before.osts())} "
                             "already hold a copy of the file")
        self._run(lfs_cmd.mirror_extend_argv(
            self.lfs, full, request, default_count=before.stripe_count,
            default_size=before.stripe_size), mutating=True)
        self._run(lfs_cmd.mirror_verify_argv(self.lfs, full), mutating=False)
        return self.layout(full)

    def remove_mirror(self, path: str, mirror_id: int) -> FileLayout:
        full = self._file(path)
        layout = self.layout(full)
        if mirror_id not in layout.mirror_ids:
            raise InputError(f"{full}: no mirror {mirror_id}")
        if len(layout.mirror_ids) == 1:
            raise InputError(f"{full}: mirror {mirror_id} is the last copy of the file")
        self._run(lfs_cmd.mirror_split_argv(self.lfs, full, mirror_id), mutating=True)
        return self.layout(full)

    # -- rebuilding lost stripes ---------------------------------------------------------------
    def begin_rebuild(self, path: str, substitutes: dict[int, int]) -> Rebuild:
        full = self._file(path)
        layout = self.layout(full)
        if layout.is_composite:
            raise StorageError(f"{full}: composite (PFL/mirrored) layout; rebuild handles plain "
                               "layouts, use the file's mirrors instead")
        size = os.stat(full).st_size
        lost = self._rebuild_plan(layout, size, substitutes)
        rebuild_id = uuid.uuid4().hex
        temp = posixpath.join(posixpath.dirname(full),
                              f".sk-rebuild.{rebuild_id[:12]}.{posixpath.basename(full)}")
        new_ost_list = tuple(substitutes.get(i, i) for i in layout.ost_list)
        placeholder = substitute_layout(layout, substitutes, lambda c, p: "")
        rebuild = Rebuild(rebuild_id, full, dict(substitutes), size, layout.layout_gen,
                          placeholder, lost)
        with self.journal.transaction() as conn:
            conn.execute("INSERT INTO lustre_rebuilds(rebuild_id, path, temp_path, record) "
                         "VALUES (?, ?, ?, ?)",
                         (rebuild_id, full, temp, json.dumps(rebuild.to_dict())))
        try:
            self._run(lfs_cmd.setstripe_argv(
                self.lfs, temp, LayoutRequest(stripe_size=layout.stripe_size,
                                              ost_list=new_ost_list, pool=layout.first.pool),
                default_count=self.default_stripe_count, default_size=self.default_stripe_size),
                mutating=True)
            # the surviving stripes are still readable: copy them now, recovery patches the rest
            for extent in subtract_extents([Extent(0, size)], lost):
                self._copy(full, temp, extent)
            os.truncate(temp, size)
            rebuild.new_layout = lfs_cmd.parse_getstripe_yaml(
                self._run(lfs_cmd.getstripe_argv(self.lfs, temp), mutating=False), full)
            self._save(rebuild)
        except BaseException:
            self._abort(rebuild_id)
            raise
        return rebuild

    def _copy(self, source: str, target: str, extent: Extent) -> None:
        src = os.open(source, os.O_RDONLY | os.O_NOFOLLOW)
        dst = os.open(target, os.O_WRONLY | os.O_NOFOLLOW)
        try:
            offset = extent.offset
            while offset < extent.end:
                try:
                    data = os.pread(src, min(COPY_CHUNK, extent.end - offset), offset)
                except OSError as err:
                    raise self._io_error(source, offset, err) from err
                if not data:
                    break
                pwrite_all(dst, data, offset)
                offset += len(data)
        finally:
            os.close(src)
            os.close(dst)

    def _save(self, rebuild: Rebuild) -> None:
        with self.journal.transaction() as conn:
            conn.execute("UPDATE lustre_rebuilds SET record = ? WHERE rebuild_id = ?",
                         (json.dumps(rebuild.to_dict()), rebuild.rebuild_id))

    def _temp_of(self, rebuild_id: str) -> tuple[str, Rebuild]:
        rows = self.journal.query("SELECT temp_path, record FROM lustre_rebuilds "
                                  "WHERE rebuild_id = ?", (rebuild_id,))
        if not rows:
            raise StorageError(f"rebuild {rebuild_id}: no such rebuild (committed or aborted)")
        return rows[0]["temp_path"], Rebuild.from_dict(json.loads(rows[0]["record"]))

    def write_rebuild_batch(self, rebuild: Rebuild, pieces: list[tuple[int, bytes]], *,
                            record: bool = True) -> None:
        extents = [self._check_patch(rebuild, offset, data) for offset, data in pieces]
        temp, _ = self._temp_of(rebuild.rebuild_id)
        fd = os.open(temp, os.O_WRONLY | os.O_NOFOLLOW)
        try:
            for offset, data in pieces:
                pwrite_all(fd, data, offset)  # synced once, before the layout swap
        finally:
            os.close(fd)
        if record:
            self.record_patched(rebuild, extents)

    def record_patched(self, rebuild: Rebuild, extents: list[Extent]) -> None:
        extents = self._check_recorded(rebuild, extents)
        if not extents:
            return
        with self.journal.transaction() as conn:
            row = conn.execute("SELECT record FROM lustre_rebuilds WHERE rebuild_id = ?",
                               (rebuild.rebuild_id,)).fetchone()
            if row is None:
                raise StorageError(f"rebuild {rebuild.rebuild_id}: no such rebuild (committed "
                                   "or aborted)")
            current = Rebuild.from_dict(json.loads(row["record"]))
            current.patched = merge_extents(current.patched + extents)
            conn.execute("UPDATE lustre_rebuilds SET record = ? WHERE rebuild_id = ?",
                         (json.dumps(current.to_dict()), rebuild.rebuild_id))
        rebuild.patched = current.patched

    def read_rebuild(self, rebuild: Rebuild, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise InputError(f"{rebuild.path}: negative offset or length")
        temp, current = self._temp_of(rebuild.rebuild_id)
        end = min(current.file_size, offset + length)
        fd = os.open(temp, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            parts, position = [], offset
            while position < end:
                try:
                    data = os.pread(fd, end - position, position)
                except OSError as err:
                    raise self._io_error(temp, position, err) from err
                if not data:
                    break
                parts.append(data)
                position += len(data)
        finally:
            os.close(fd)
        return b"".join(parts)

    def commit_rebuild(self, rebuild: Rebuild, patched: list[Extent] = ()) -> FileLayout:
        temp, current = self._temp_of(rebuild.rebuild_id)
        current.patched = merge_extents(current.patched + self._check_recorded(rebuild, patched))
        self._check_complete(current)
        layout = self.layout(current.path)
        if layout.layout_gen != current.base_layout_gen or \
                os.stat(current.path).st_size != current.file_size:
            raise StorageError(f"{current.path}: changed since rebuild {current.rebuild_id} "
                               "began; abort it and start again")
        fd = os.open(temp, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            os.fsync(fd)  # the swapped-in layout may only hold bytes that are on disk
        finally:
            os.close(fd)
        self._run(lfs_cmd.swap_layouts_argv(self.lfs, current.path, temp), mutating=True)
        self._abort(current.rebuild_id)  # the temporary file now holds the old, broken layout
        log.info("lustre: rebuild %s of %s committed", current.rebuild_id, current.path)
        return self.layout(current.path)

    def abort_rebuild(self, rebuild: Rebuild) -> None:
        self._abort(rebuild.rebuild_id)

    def _abort(self, rebuild_id: str) -> None:
        rows = self.journal.query("SELECT temp_path FROM lustre_rebuilds WHERE rebuild_id = ?",
                                  (rebuild_id,))
        if rows:
            try:
                os.unlink(rows[0]["temp_path"])
            except FileNotFoundError:
                pass
        with self.journal.transaction() as conn:
            conn.execute("DELETE FROM lustre_rebuilds WHERE rebuild_id = ?", (rebuild_id,))

    def open_rebuilds(self) -> list[Rebuild]:
        return [Rebuild.from_dict(json.loads(row["record"])) for row in self.journal.query(
            "SELECT record FROM lustre_rebuilds ORDER BY rebuild_id")]


def _xattr_error(full: str, name: str, err: OSError) -> ScratchkeeperError:
    if err.errno in (errno.EPERM, errno.EACCES):
        return PermissionDenied(f"{full}: xattr {name}: permission denied")
    if err.errno in (errno.ENOTSUP, errno.EINVAL, errno.ERANGE, errno.E2BIG):
        return InputError(f"{full}: xattr {name}: {err.strerror}")
    return StorageError(f"{full}: xattr {name}: {err.strerror}")
