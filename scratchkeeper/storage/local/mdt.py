"""The local store's MDT: the namespace as a real directory tree (docs/mount.rst).

``store_root/mdt/a/b`` is the scratch path ``SCRATCH_ROOT/a/b``. A store file is a sparse
regular inode there: its ``st_size`` is the file's size, owner, mode, times and ``user.*``/
``trusted.*`` extended attributes are the file's, and its layout is the extended attribute
``security.scratchkeeper.lov`` (:meth:`FileLayout.to_lov`). ``store_root/mdt.staging`` holds
inodes and directories being prepared, named after their process (``pid:PID:START.UUID``) so
that garbage collection can remove those of dead processes.

The tree is walked one component at a time with ``O_PATH|O_NOFOLLOW`` descriptors, relative to
the previous directory: users change the MDT through the mount (symbolic links included), and
the store, running as root, must never be led out of it by a link. The MDT is the store
owner's alone (0700): a process of another user walks the same tree through the scratch mount
(:mod:`.users`), where the kernel checks its rights at every step.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat as statmod
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ...errors import InputError, PermissionDenied, StorageError
from ..layout import DIRLOV_XATTR, LOV_XATTR, DirDefault, FileLayout
from .processes import process_owner

MDT = "mdt"
STAGING = "mdt.staging"
#: what the scratch mount's root shows (``mode=O uid=U gid=G``), kept on the MDT directory,
#: which is the store owner's and 0700 itself (docs/mount.rst; the mount's native/access.c)
ROOT_XATTR = "trusted.scratchkeeper.root"
REMOVED = "-removed"  # the suffix of a staging entry holding a file taken out of the namespace
_WALK = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
RENAME_NOREPLACE = 1
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass
class Inode:
    """A store file as its MDT inode says it is; ``fd`` (``O_PATH``) is valid while opened."""

    path: str
    fd: int
    parent_fd: int
    name: str
    st: os.stat_result
    layout: FileLayout

    @property
    def size(self) -> int:
        return self.st.st_size

    @property
    def proc(self) -> str:
        """A path naming this very inode (for the calls that take no descriptor)."""
        return fd_path(self.fd)


def fd_path(fd: int) -> str:
    return f"/proc/self/fd/{fd}"


def rename_noreplace(src_dir: int, src: str, dst_dir: int, dst: str) -> None:
    """``renameat2(RENAME_NOREPLACE)``: move into place only where nothing is (a directory
    rename would otherwise replace an empty directory another process just made)."""
    if _libc.renameat2(src_dir, os.fsencode(src), dst_dir, os.fsencode(dst),
                       RENAME_NOREPLACE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), dst)


def fsync_fd_dir(dir_fd: int) -> None:
    """Sync a directory known by an ``O_PATH`` descriptor."""
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def keep_root_shown(mdt_root: Path) -> None:
    """Before the MDT directory of an older store is closed: record the mode, owner and group
    users saw at the scratch root (the directory's own) as :data:`ROOT_XATTR`, unless it is
    recorded already or the directory is closed already (the mount then shows its default).
    Only root sets a ``trusted.*`` attribute, and only root runs the mount."""
    if os.geteuid() != 0:
        return
    try:
        os.getxattr(mdt_root, ROOT_XATTR)
        return
    except FileNotFoundError:
        return
    except OSError as err:
        if err.errno != errno.ENODATA:
            raise StorageError(f"{mdt_root}: {ROOT_XATTR}: {err.strerror}") from None
    info = os.stat(mdt_root)
    if not info.st_mode & 0o077:
        return
    os.setxattr(mdt_root, ROOT_XATTR, f"mode={statmod.S_IMODE(info.st_mode):04o} "
                                      f"uid={info.st_uid} gid={info.st_gid}".encode())


def read_layout(fd: int, full: str) -> FileLayout:
    try:
        data = os.getxattr(fd_path(fd), LOV_XATTR)
    except OSError as err:
        if err.errno == errno.ENODATA:
            raise StorageError(f"{full}: has no layout ({LOV_XATTR} is missing)") from None
        raise StorageError(f"{full}: cannot read its layout: {err.strerror}") from None
    return FileLayout.from_lov(data, full)


class MdtMixin:
    """The MDT side of :class:`~scratchkeeper.storage.local.LocalStripedStore`."""

    @property
    def mdt_root(self) -> Path:
        return self.store_root / MDT

    @property
    def staging_root(self) -> Path:
        return self.store_root / STAGING

    def _staging_name(self) -> str:
        return f"{process_owner()}.{uuid.uuid4().hex}"

    # -- walking -------------------------------------------------------------------------------
    def _mdt_ready(self) -> None:
        """Open the store (which creates and migrates the MDT) before using the MDT."""
        if self._db is None and not getattr(self, "_migrating", False):
            self._ensure_open()

    def _open_mdt_root(self, full: str) -> int:
        """An ``O_PATH`` descriptor of the namespace's root: the MDT's, or the scratch mount's
        for a process that reads through it."""
        self._mdt_ready()
        if self._through_mount:
            return self._mount_root()
        try:
            return os.open(self.mdt_root, _WALK)
        except FileNotFoundError:
            raise InputError(f"{full}: no such file in the store") from None
        except PermissionError:
            raise PermissionDenied(f"{full}: permission denied (uid {os.geteuid()} may not "
                                   f"reach the store's namespace {self.mdt_root})") from None

    def _walk_parent(self, full: str, *, create: tuple[int, int] | None = None
                     ) -> tuple[int, str]:
        """An ``O_PATH`` descriptor of the MDT directory of ``full``, and the name in it.

        ``create``: the owner of missing directories, made 0755 with their parent's default
        layout (else a missing directory is "no such file").
        """
        relative = self.paths.relative(full)
        if not relative:
            raise InputError(f"{full}: is the scratch root, not a file")
        *directories, name = relative.split("/")
        fd = self._open_mdt_root(full)
        walked = self.scratch_root
        try:
            for component in directories:
                walked = f"{walked.rstrip('/')}/{component}"
                try:
                    child = os.open(component, _WALK, dir_fd=fd)
                except FileNotFoundError:
                    if create is None:
                        raise InputError(f"{full}: no such file in the store") from None
                    child = self._make_dir_in(fd, component, create, walked)
                except PermissionError:
                    raise PermissionDenied(f"{full}: permission denied (uid {os.geteuid()} may "
                                           f"not reach {walked})") from None
                except OSError as err:
                    if err.errno not in (errno.ENOTDIR, errno.ELOOP):
                        raise StorageError(f"{full}: cannot open {walked} in the store: "
                                           f"{err.strerror}") from err
                    raise InputError(f"{full}: {walked} is not a directory in the store") \
                        from None
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd, name

    def _make_dir_in(self, parent_fd: int, name: str, owner: tuple[int, int],
                     label: str) -> int:
        """Create directory ``name`` in ``parent_fd``: prepared in the staging directory (owner,
        0755, the parent's default layout) and moved into place whole; one another process
        made first is used instead."""
        staged = self._staging_name()
        staging_fd = os.open(self.staging_root, _WALK)
        try:
            os.mkdir(staged, 0o700, dir_fd=staging_fd)
            try:
                made = os.open(staged, _WALK, dir_fd=staging_fd)
                try:
                    if os.geteuid() == 0:
                        os.chown(fd_path(made), *owner)
                    with contextlib.suppress(OSError):
                        default = os.getxattr(fd_path(parent_fd), DIRLOV_XATTR)
                        os.setxattr(fd_path(made), DIRLOV_XATTR, default)
                    os.chmod(fd_path(made), 0o755)
                finally:
                    os.close(made)
                rename_noreplace(staging_fd, staged, parent_fd, name)
            except FileExistsError:
                os.rmdir(staged, dir_fd=staging_fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.rmdir(staged, dir_fd=staging_fd)
                raise
        except OSError as err:
            if err.errno in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise StorageError(f"{label}: cannot create the directory in the store: "
                               f"{err.strerror}") from err
        finally:
            os.close(staging_fd)
        fsync_fd_dir(parent_fd)
        try:
            return os.open(name, _WALK, dir_fd=parent_fd)
        except OSError as err:
            raise InputError(f"{label}: is not a directory in the store") from err

    def _dir_default(self, full: str) -> DirDefault | None:
        """The default layout a new file at ``full`` takes: that of the nearest existing
        directory on its way (a directory created for it inherits it)."""
        relative = self.paths.relative(full)
        directories = relative.split("/")[:-1] if relative else []
        fd = self._open_mdt_root(full)
        try:
            default = _dirlov(fd, self.scratch_root)
            walked = self.scratch_root
            for component in directories:
                walked = f"{walked.rstrip('/')}/{component}"
                try:
                    child = os.open(component, _WALK, dir_fd=fd)
                except OSError:
                    break  # created later, inheriting what was found so far
                os.close(fd)
                fd = child
                default = _dirlov(fd, walked)
        finally:
            os.close(fd)
        return default

    @contextlib.contextmanager
    def _opened(self, path: str) -> Iterator[Inode]:
        """The store file at ``path``, its descriptors open for the block."""
        full = self.paths.resolve(path)
        parent_fd, name = self._walk_parent(full)
        try:
            try:
                fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
            except FileNotFoundError:
                raise InputError(f"{full}: no such file in the store") from None
            except PermissionError:
                raise PermissionDenied(f"{full}: permission denied (uid {os.geteuid()} may not "
                                       "reach it)") from None
            try:
                st = os.fstat(fd)
                if statmod.S_ISDIR(st.st_mode):
                    raise InputError(f"{full}: is a directory, not a file")
                if not statmod.S_ISREG(st.st_mode):
                    raise InputError(f"{full}: no such file in the store (not a regular file)")
                yield Inode(full, fd, parent_fd, name, st, read_layout(fd, full))
            finally:
                os.close(fd)
        finally:
            os.close(parent_fd)

    def _inode(self, path: str) -> Inode:
        """The store file at ``path`` (descriptors closed: the stat and layout only)."""
        with self._opened(path) as node:
            return node

    def _lookup(self, full: str) -> Inode | None:
        try:
            return self._inode(full)
        except InputError:
            return None

    def _mdt_entry(self, full: str) -> os.stat_result | None:
        """What is at ``full`` in the MDT (not followed), or None."""
        if full == self.scratch_root:
            try:
                fd = self._open_mdt_root(full)
            except InputError:
                return None
            try:
                return os.fstat(fd)
            finally:
                os.close(fd)
        try:
            parent_fd, name = self._walk_parent(full)
        except InputError:
            return None
        try:
            return os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        finally:
            os.close(parent_fd)

    # -- preparing inodes ----------------------------------------------------------------------
    def _stage_inode(self, layout: FileLayout, *, size: int, uid: int, gid: int, mode: int,
                     mtime_ns: int, xattrs: dict[str, bytes] | None = None) -> str:
        """A complete inode in the staging directory (size, owner, mode, times, layout,
        ``xattrs``), synced; its name there."""
        lov = layout.to_lov()
        name = self._staging_name()
        staging_fd = os.open(self.staging_root, _WALK)
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600, dir_fd=staging_fd)
            try:
                if os.geteuid() == 0:
                    os.fchown(fd, uid, gid)
                os.ftruncate(fd, size)
                os.setxattr(fd, LOV_XATTR, lov)
                for key, value in (xattrs or {}).items():
                    os.setxattr(fd, key, value)
                os.fchmod(fd, statmod.S_IMODE(mode))  # after fchown, which clears set-id bits
                os.utime(fd, ns=(mtime_ns, mtime_ns))
                os.fsync(fd)
            except BaseException:
                os.close(fd)
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=staging_fd)
                raise
            os.close(fd)
        finally:
            os.close(staging_fd)
        return name

    def _move_to_staging(self, node: Inode, suffix: str) -> str:
        """Move the file's name out of the namespace into the staging directory, synced; its
        name there (this process's staging name and ``suffix``)."""
        name = f"{self._staging_name()}{suffix}"
        staging_fd = os.open(self.staging_root, _WALK)
        try:
            os.rename(node.name, name, src_dir_fd=node.parent_fd, dst_dir_fd=staging_fd)
            fsync_fd_dir(node.parent_fd)
            fsync_fd_dir(staging_fd)
        finally:
            os.close(staging_fd)
        return name

    def _unstage(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.staging_root / name)

    def _link_staged(self, staged: str, full: str, owner: tuple[int, int], *,
                     replace_old=None, on_linked=None) -> tuple[Inode | None, str | None]:
        """Put the staged inode at ``full`` (missing directories made for ``owner``): ``link``
        where nothing is, ``rename`` over a store file when ``replace_old(old_inode)`` allows
        it (it raises otherwise). Returns the replaced file, if any. Call under the store's
        lock; the caller has marked the objects' intents committing. ``on_linked()`` is called
        the moment the inode is in the namespace (what fails after it must not undo it).
        The replaced file's name in the staging directory comes with it, for the caller to
        remove once the file's objects are doomed."""
        parent_fd, name = self._walk_parent(full, create=owner)
        staging_fd = os.open(self.staging_root, _WALK)
        replaced = removed = None
        try:
            try:
                os.link(staged, name, src_dir_fd=staging_fd, dst_dir_fd=parent_fd,
                        follow_symlinks=False)
            except FileExistsError:
                if replace_old is None:
                    raise InputError(f"{full}: already exists in the store") from None
                try:
                    replaced = self._inode(full)
                except InputError:
                    raise InputError(f"{full}: already exists in the store and is not a "
                                     "file") from None
                replace_old(replaced)
                # the old file keeps a name in the staging directory until the caller has
                # doomed its objects: a crash after the rename leaves it to the collector
                removed = f"{self._staging_name()}{REMOVED}"
                os.link(name, removed, src_dir_fd=parent_fd, dst_dir_fd=staging_fd,
                        follow_symlinks=False)
                fsync_fd_dir(staging_fd)
                try:
                    os.rename(staged, name, src_dir_fd=staging_fd, dst_dir_fd=parent_fd)
                except BaseException:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(removed, dir_fd=staging_fd)
                    raise
                if on_linked is not None:
                    on_linked()
            else:
                if on_linked is not None:
                    on_linked()
                os.unlink(staged, dir_fd=staging_fd)
            fsync_fd_dir(parent_fd)
        finally:
            os.close(staging_fd)
            os.close(parent_fd)
        return replaced, removed

    # -- walking the tree ----------------------------------------------------------------------
    def _walk_files(self) -> Iterator[tuple[str, str]]:
        """``(scratch path, MDT path)`` of every regular file of the MDT, in name order;
        directories this process may not read are passed over, links not followed. Through
        the scratch mount, the MDT path is one below the mount's root descriptor, valid while
        the walk goes on."""
        self._mdt_ready()
        if not self._through_mount:
            yield from self._walk_files_from(str(self.mdt_root))
            return
        root_fd = self._mount_root()
        try:
            yield from self._walk_files_from(fd_path(root_fd))
        finally:
            os.close(root_fd)

    def _walk_files_from(self, root: str) -> Iterator[tuple[str, str]]:
        stack = [(root, self.scratch_root)]
        while stack:
            directory, scratch = stack.pop()
            try:
                with os.scandir(directory) as entries:
                    listed = sorted(entries, key=lambda e: e.name, reverse=True)
            except OSError:
                continue
            for entry in listed:
                child = f"{scratch.rstrip('/')}/{entry.name}"
                if entry.is_dir(follow_symlinks=False):
                    stack.append((entry.path, child))
                elif entry.is_file(follow_symlinks=False):
                    yield child, entry.path


def _dirlov(fd: int, label: str) -> DirDefault | None:
    try:
        data = os.getxattr(fd_path(fd), DIRLOV_XATTR)
    except OSError as err:
        if err.errno == errno.ENODATA:
            return None
        raise StorageError(f"{label}: cannot read its default layout: {err.strerror}") from None
    return DirDefault.from_xattr(data, label)
