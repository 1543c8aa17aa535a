"""Reading the local store as a user other than its owner: through the scratch mount.

The store's MDT, staging and OST directories are its owner's alone (0700) and every object is
0600: no other process can resolve a name under them, so an object id (which anyone who may
read a file's layout sees) names nothing a user can open, and ``grep -r`` over ``store_root``
finds nothing. As on Lustre, where users reach the OSTs only through the client and the MDS
checks every open, a user's process (a batch job's ``scratchkeeper store cat``,
``recovery status``...) walks the scratch mount at ``storage.scratch_root`` instead of the MDT:
the kernel checks every lookup there (search permission on each directory of the path) and
every open against the MDT inode's owner, mode and POSIX ACL (the mount runs with
``default_permissions`` and FUSE's POSIX ACL support). The layout is the attribute
``security.scratchkeeper.lov`` read through the mount, the bytes are read by opening the file
through the mount, and the OSTs' states are the entry names of ``store_root`` (``ostNNNN``,
``ostNNNN.failed``), which stays 0755 so that every user may list them.

Without the scratch mount at the scratch root such a process reads nothing: one line,
:class:`PermissionDenied`.

The one change such a process may ask is a layout, on its own files only, as ``lfs setstripe``
does on Lustre (:meth:`UsersMixin.lay_out_through_mount`): it sets
``user.scratchkeeper.stripe`` through the mount on a new, empty file of its own or a directory
of its own, and the mount, not this process, makes the objects (docs/storage.rst, "A user's
layout").
"""

from __future__ import annotations

import errno
import os
import stat as statmod

from ...errors import InputError, PermissionDenied, StorageError
from ..base import OST_ACTIVE, OST_FAILED
from ..layout import DirDefault
from .mdt import Inode

#: set through the mount on a directory (its default layout) or an empty file (its layout) by
#: their owner: stripe count, size and pool, the text of ``DirDefault.to_xattr``
STRIPE_XATTR = "user.scratchkeeper.stripe"
MOUNT_TYPE = "fuse.scratchkeeper"
MOUNTINFO = "/proc/self/mountinfo"
_ROOT = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC


class UsersMixin:
    """The read side of :class:`~scratchkeeper.storage.local.LocalStripedStore` for a process
    that is neither the store's owner nor root."""

    _through_mount = False
    _mount_id: tuple[int, int] | None = None  # (st_dev, st_ino) of the mount's root, checked

    @property
    def through_mount(self) -> bool:
        """Whether this process reads the store through the scratch mount (it is another user
        than the store's owner: the MDT and the objects are closed to it)."""
        self._ensure_open()
        return self._through_mount

    def _open_through_mount(self) -> None:
        """Open the store for a process that may read it only through the scratch mount. The
        mount is looked for at each walk (:meth:`_mount_root`): a command that meets none is
        refused with one line, and ``list_osts`` needs none."""
        self._through_mount = True

    def _not_mounted(self, why: str) -> PermissionDenied:
        keeper = "root" if self._owner_uid == 0 else f"its owner (uid {self._owner_uid})"
        return PermissionDenied(f"the store at {self.store_root} keeps its data for {keeper}: "
                                f"users read it through the scratch mount at "
                                f"{self.scratch_root}, which {why}")

    def _mount_root(self) -> int:
        """An ``O_PATH`` descriptor of the scratch mount's root, checked to be this store's
        mount: a ``fuse.scratchkeeper`` mount at the scratch root whose root is the store's MDT
        root (the mount answers with the MDT's inode numbers, on a device of its own)."""
        try:
            fd = os.open(self.scratch_root, _ROOT)
        except OSError as err:
            raise self._not_mounted(f"cannot be opened ({err.strerror})") from None
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != self._mount_id:
                why = self._mount_refusal(st)
                if why:
                    raise self._not_mounted(why)
                self._mount_id = (st.st_dev, st.st_ino)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _mount_refusal(self, st: os.stat_result) -> str | None:
        """Why the directory at the scratch root (``st``) is not this store's scratch mount;
        None when it is."""
        devices = scratch_mount_devices(os.path.realpath(self.scratch_root))
        if st.st_dev not in devices:
            return "is not mounted"
        try:
            mdt = os.stat(self.mdt_root)
        except OSError as err:
            return f"cannot be checked ({self.mdt_root}: {err.strerror})"
        if st.st_ino != mdt.st_ino or st.st_dev == mdt.st_dev:
            return "serves another store"
        return None

    def _ost_states_by_name(self) -> dict[int, str]:
        """Each OST's state as ``store_root``'s entry names say: ``ostNNNN`` active,
        ``ostNNNN.failed`` failed (``fail-ost`` renames the directory, and the mount reads the
        same names); an OST with neither is not made yet (its owner has not opened the store
        since ``storage.ost_count`` grew)."""
        states = {}
        for index in range(self.ost_count):
            if self._ost_dir(index).is_dir():
                states[index] = OST_ACTIVE
            elif self._failed_dir(index).is_dir():
                states[index] = OST_FAILED
        return states

    def _owner_only(self, what: str) -> None:
        """Refuse ``what`` (which needs the OST directories) to a process reading through the
        scratch mount."""
        if self.through_mount:
            raise PermissionDenied(f"{what} needs the store's owner (uid {self._owner_uid}): the "
                                   f"OST directories of {self.store_root} are closed to uid "
                                   f"{os.geteuid()}")

    def lay_out_through_mount(self, full: str, default: DirDefault, *, file: bool) -> None:
        """Set the layout of this user's new, empty file at scratch path ``full`` (``file``:
        made when missing, a file holding data replaced by an empty one, as ``store setstripe
        --file`` does for the store's owner) or the default layout of this user's directory
        ``full``, through the scratch mount: the kernel checks every lookup and the write
        permission, the mount that the caller owns it, that the file is empty and that the
        settings are within the store's (count, size, one of its pools; no OST list)."""
        os.close(self._mount_root())  # the store's own mount is at the scratch root
        parent_fd, name = self._open_parent(full)
        try:
            if file:
                fd = self._empty_file_in(parent_fd, name, full)
            else:
                fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                             dir_fd=parent_fd)
            try:
                os.setxattr(fd, STRIPE_XATTR, default.to_xattr())
            except OSError as err:
                raise self._layout_refused(full, default, err, file) from None
            finally:
                os.close(fd)
        except FileNotFoundError:
            raise InputError(f"{full}: no such directory") from None
        except NotADirectoryError:
            raise InputError(f"{full}: is not a directory") from None
        except PermissionError:
            raise PermissionDenied(f"{full}: permission denied (uid {os.geteuid()})") from None
        finally:
            os.close(parent_fd)

    @staticmethod
    def _empty_file_in(parent_fd: int, name: str, full: str) -> int:
        """A descriptor of a new, empty file ``name`` of this user; a regular file there is
        unlinked first (the kernel lets only who may remove it), anything else refused."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            info = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            if not statmod.S_ISREG(info.st_mode):
                raise InputError(f"{full}: exists and is not a regular file")
            os.unlink(name, dir_fd=parent_fd)  # a re-staged input: written over whole anyway
        return os.open(name, flags, 0o666, dir_fd=parent_fd)

    def _layout_refused(self, full: str, default: DirDefault, err: OSError,
                        file: bool) -> Exception:
        """What the mount's answer to a layout means, in one line."""
        what = "file" if file else "directory"
        if err.errno in (errno.EPERM, errno.EACCES):
            return PermissionDenied(f"{full}: only the {what}'s owner (or root) may set its "
                                    f"layout (uid {os.geteuid()} asked)")
        if err.errno == errno.ENOTEMPTY:
            return InputError(f"{full}: holds data: a layout is set on an empty file only "
                              "(as Lustre's)")
        if err.errno == errno.EBUSY:
            return InputError(f"{full}: being written: a layout is set before the file is "
                              "written")
        if err.errno == errno.EINVAL:
            pools = ", ".join(sorted(self.pools)) or "none"
            return InputError(f"{full}: the store refused stripe count {default.stripe_count}, "
                              f"stripe size {default.stripe_size}, pool "
                              f"{default.pool or '-'}: at most {self.ost_count} OSTs (or -1), "
                              f"a multiple of 64 KiB below 4 GiB, one of its pools ({pools})")
        if err.errno == errno.ENOSPC:
            return StorageError(f"{full}: no healthy OST can take the layout "
                                f"(pool {default.pool or '-'})")
        if err.errno == errno.ENOTSUP:
            return StorageError(f"{full}: the scratch mount at {self.scratch_root} cannot set "
                                "a layout (an older mount: restart it)")
        return StorageError(f"{full}: the scratch mount refused the layout: {err.strerror}")

    def _read_mounted(self, node: Inode, offset: int, end: int) -> bytes:
        """Bytes ``[offset, end)`` of the file ``node`` (walked through the mount), read by
        opening it through the mount: the kernel checks the caller's right to read it, ACLs
        included. The caller checked that a healthy mirror serves every stripe of the range."""
        try:
            # a new open of the very inode walked (no name is resolved again)
            fd = os.open(node.proc, os.O_RDONLY | os.O_NOCTTY | os.O_CLOEXEC)
        except PermissionError:
            raise PermissionDenied(f"{node.path}: permission denied (uid {os.geteuid()} may not "
                                   "read it)") from None
        except OSError as err:
            raise StorageError(f"{node.path}: cannot open it through the scratch mount: "
                               f"{err.strerror}") from None
        try:
            if not statmod.S_ISREG(os.fstat(fd).st_mode):
                raise StorageError(f"{node.path}: not a regular file through the scratch mount")
            out = bytearray()
            while offset + len(out) < end:
                try:
                    data = os.pread(fd, end - offset - len(out), offset + len(out))
                except OSError as err:
                    raise StorageError(f"{node.path}: cannot read byte {offset + len(out)} "
                                       f"through the scratch mount: {err.strerror}") from None
                if not data:
                    break  # the file shrank meanwhile: what is left of the range
                out += data
            return bytes(out)
        finally:
            os.close(fd)


def scratch_mount_devices(mountpoint: str) -> set[int]:
    """The devices (``st_dev``) of the ``fuse.scratchkeeper`` mounts /proc/self/mountinfo lists
    at ``mountpoint``."""
    devices = set()
    try:
        with open(MOUNTINFO, encoding="utf-8", errors="surrogateescape") as info:
            for line in info:
                fields = line.rstrip("\n").split(" ")
                try:
                    separator = fields.index("-")
                    major, minor = fields[2].split(":")
                    if _unescape(fields[4]) == mountpoint and \
                            fields[separator + 1] == MOUNT_TYPE:
                        devices.add(os.makedev(int(major), int(minor)))
                except (ValueError, IndexError):
                    continue
    except OSError as err:
        if err.errno != errno.ENOENT:
            raise StorageError(f"{MOUNTINFO}: cannot be read: {err.strerror}") from None
    return devices


def _unescape(field: str) -> str:
    r"""A mountinfo path: the kernel writes space, tab, newline and backslash as ``\ooo``."""
    if "\\" not in field:
        return field
    out, index = [], 0
    while index < len(field):
        if field[index] == "\\" and field[index + 1:index + 4].isdigit():
            out.append(chr(int(field[index + 1:index + 4], 8)))
            index += 4
        else:
            out.append(field[index])
            index += 1
    return "".join(out)
