"""The local store's objects: one directory per OST under ``store_root``, one file per object,
filled exactly as Lustre's RAID-0 fills its objects (see :mod:`scratchkeeper.storage.layout`).

Failing an OST renames its directory to ``ostNNNN.failed``: its objects really cannot be
opened, as on a dead OSS, until ``restore_ost`` puts it back.

Users never reach an object, as Lustre's users never reach an OST: the OST directories are the
store owner's, mode 0700, so no other process can resolve a name in them, and an object id
(which every user may read in a layout) names nothing a user can open. Every object is mode
0600 with its file's owner and group (the backing file system charges the owner). Users read
the data through the scratch mount, whose permission check is the kernel's (docs/storage.rst,
"Several users").
"""

from __future__ import annotations

import contextlib
import errno
import logging
import mmap
import os
import re
import stat as statmod
import threading
from collections.abc import Iterable
from pathlib import Path

from ...errors import PermissionDenied, StorageError, TargetUnavailable
from ..base import pwrite_all, pwritev_all
from ..layout import FileLayout, LayoutComponent, StripeObject
from ..sources import read_sized

log = logging.getLogger(__name__)

COPY_CHUNK = 4 << 20
DIRECT_ALIGN = 4096  # O_DIRECT offsets, lengths and buffers: a multiple of any logical block
DIRECT_BUFFER = 4 << 20  # the aligned staging buffer of each writing thread
DIRECT_RUN_BYTES = 16 << 20  # most contiguous aligned bytes written in one pwritev
DIRECT_RUN_BUFFERS = 64  # and most buffers in it (far below IOV_MAX)
OBJECT_MODE = 0o600  # every object, whatever its file's mode (the module's docstring)
CLOSED_DIR_MODE = 0o700  # the MDT, its staging directory and the OST directories
#: objects of files removed through the scratch mount while their OST was failed, named
#: ``NNNN.OBJECT_ID`` (empty files, NNNN the OST): deleted when the OST is back (docs/storage.rst)
DOOMED = "doomed"
_OBJECT_ID = re.compile(r"[0-9a-f]{32}")
_direct_buffers = threading.local()


class ObjectsMixin:
    """The object side of :class:`~scratchkeeper.storage.local.LocalStripedStore`: OST
    directories, creating, opening, writing and syncing objects."""

    def _ost_dir(self, ost_index: int) -> Path:
        return self.store_root / f"ost{ost_index:04d}"

    def _failed_dir(self, ost_index: int) -> Path:
        return self.store_root / f"ost{ost_index:04d}.failed"

    def _object_path(self, obj: StripeObject) -> Path:
        return self._ost_dir(obj.ost_index) / obj.object_id

    def drop_cache(self, path: str) -> None:
        """Sync each object of the file and drop its pages (``POSIX_FADV_DONTNEED`` leaves dirty
        pages cached); objects on a failed OST are skipped (no read reaches them). The objects
        are the store owner's to open: a user reading through the scratch mount is refused."""
        layout = self.layout(path)
        if self.through_mount:
            raise PermissionDenied(f"{layout.path}: dropping the cache of its objects needs the "
                                   f"store's owner (uid {self._owner_uid}): the objects are "
                                   "closed to other users")
        for obj in {o for comp in layout.components for o in comp.objects}:
            try:
                fd = os.open(self._object_path(obj), os.O_RDONLY | os.O_NOFOLLOW)
            except FileNotFoundError:
                continue
            except PermissionError as err:
                raise PermissionDenied(f"{path}: object {obj.object_id} on OST "
                                       f"{obj.ost_index}: {err.strerror}") from err
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)

    def _create_objects(self, objects: Iterable[StripeObject], *, uid: int, gid: int) -> None:
        """Create empty objects for a file of owner ``uid:gid``.

        Each object gets the file's owner when the store runs as root (the backing file
        system's quota charges the owner) and mode 0600 whatever the file's mode: the file's
        permissions, ACLs included, are checked on its MDT inode by the scratch mount; an
        object's own mode could say neither an ACL nor a directory's search permission, and a
        mode copied here went stale at the next ``chmod`` (the leak of issue 30).
        """
        as_root = os.geteuid() == 0
        for obj in objects:
            fd = os.open(self._object_path(obj), os.O_WRONLY | os.O_CREAT | os.O_EXCL |
                         os.O_NOFOLLOW | os.O_CLOEXEC, OBJECT_MODE)
            try:
                if as_root:
                    os.fchown(fd, uid, gid)
                os.fchmod(fd, OBJECT_MODE)  # exact, whatever the umask
            finally:
                os.close(fd)

    def _close_objects(self) -> int:
        """Make every object of the store mode :data:`OBJECT_MODE` (objects made before
        namespace version 4 carried their file's read bits); the number changed.

        One pass over the OST directories (failed ones too), one ``lstat`` per object: bounded
        by the object count, and idempotent, so an interrupted pass is simply run again. The
        directories are closed first (:func:`close_dir`), so no user can swap an entry meanwhile.
        """
        changed = 0
        for index in range(self.ost_count):
            for directory in (self._ost_dir(index), self._failed_dir(index)):
                try:
                    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                except FileNotFoundError:
                    continue
                try:
                    changed += _close_objects_in(dir_fd, directory)
                finally:
                    os.close(dir_fd)
        if changed:
            log.info("store %s: %d object(s) made %o (closed to other users)", self.store_root,
                     changed, OBJECT_MODE)
        return changed

    def _copy_in(self, fd: int, size: int, component: LayoutComponent, label: str) -> None:
        """Copy the ``size`` bytes of the regular file ``fd`` (named ``label``) into the
        component's objects and sync them."""
        self._fill_objects(component, read_sized(fd, size, label, COPY_CHUNK))

    def _fill_objects(self, component: LayoutComponent, chunks: Iterable[tuple[int, bytes]],
                      path: str | None = None) -> None:
        """Write ``(offset, bytes)`` chunks of a file into the component's objects, then sync
        them."""
        handles = self._open_objects(component.objects, os.O_WRONLY, path)
        try:
            for offset, data in chunks:
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

    def _sync_objects(self, objects: list[StripeObject], path: str, *,
                      sync_directories: bool = True) -> set[str]:
        """Sync the objects' bytes and (unless told not to) their directories; the
        directories, for a caller that syncs several objects' directories once."""
        directories = set()
        for obj in objects:
            handle = self._open_object(obj, os.O_RDONLY, path)
            try:
                os.fdatasync(handle)  # the data and the size; mtime need not wait
            finally:
                os.close(handle)
            directories.add(os.path.dirname(self._object_path(obj)))
        if sync_directories:
            for directory in sorted(directories):
                fsync_dir(directory)  # and the objects' names
        return directories

    def _sweep_doomed(self, ost_index: int) -> int:
        """Delete the objects the scratch mount named in :data:`DOOMED` for the OST, which is
        back (the mount does the same when it sees the OST return); how many."""
        directory = self.store_root / DOOMED
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return 0
        swept = 0
        for name in names:
            index, _, object_id = name.partition(".")
            if not index.isdigit() or int(index) != ost_index or \
                    not _OBJECT_ID.fullmatch(object_id):
                continue
            with contextlib.suppress(FileNotFoundError):
                (self._ost_dir(ost_index) / object_id).unlink()
            with contextlib.suppress(FileNotFoundError):
                (directory / name).unlink()
            swept += 1
        if swept:
            log.info("store %s: OST %d: %d object(s) of removed files deleted", self.store_root,
                     ost_index, swept)
        return swept

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


class ObjectWrite:
    """A write of file bytes into the objects of every in-sync component, all or nothing
    (docs/storage.rst, "All or nothing").

    Every object it changes is opened before any byte is written (an OST down is
    :class:`TargetUnavailable` then); what the file grows over is first cut to the file's end
    (bytes a truncate or a crash left there are never the file's); the bytes each piece
    overwrites are kept, and a piece that fails puts back what the pieces before it changed
    before the error goes up. :meth:`undo` does the same for a failure after the write (the
    MDT inode's). The objects stay open until the block ends.
    """

    def __init__(self, store: ObjectsMixin, layout: FileLayout, healthy: set[int]):
        self.store, self.layout, self.healthy = store, layout, healthy
        self.handles: dict[StripeObject, int] = {}
        self.done: list[tuple[int, int, int, bytes]] = []  # handle, offset, size before, old

    def __enter__(self) -> ObjectWrite:
        return self

    def __exit__(self, *exc) -> None:
        for handle in self.handles.values():
            os.close(handle)

    def _handle(self, obj: StripeObject) -> int:
        handle = self.handles.get(obj)
        if handle is None:
            if obj.ost_index not in self.healthy:
                raise TargetUnavailable(f"{self.layout.path}: OST {obj.ost_index} is "
                                        "unavailable", ost_index=obj.ost_index,
                                        path=self.layout.path)
            handle = self.handles[obj] = self.store._open_object(obj, os.O_RDWR,
                                                                 self.layout.path)
        return handle

    def write(self, offset: int, data: bytes, size: int) -> None:
        """``data`` at file ``offset`` of the file, ``size`` bytes now."""
        end = offset + len(data)
        components = [c for c in self.layout.components if in_sync(c)]
        pieces = [(comp.objects[piece.position], piece) for comp in components
                  for lo, hi in [span(comp, offset, end)] if hi > lo
                  for piece in comp.pieces(lo, hi - lo)]
        reached = offset
        for lo, hi in sorted(span(comp, offset, end) for comp in components):
            if lo > reached:
                break
            reached = max(reached, hi)
        if reached < end:
            raise StorageError(f"{self.layout.path}: no in-sync mirror holds byte {reached}")
        for obj, _ in pieces:
            self._handle(obj)  # every one before any byte: one down, nothing written
        if end > size:
            self._cut_tails(components, size, end)
        view = memoryview(data)
        try:
            for obj, piece in pieces:
                handle = self.handles[obj]
                before = os.fstat(handle).st_size
                keep = max(0, min(piece.length, before - piece.object_offset))
                self.done.append((handle, piece.object_offset, before,
                                  os.pread(handle, keep, piece.object_offset)))
                start = piece.file_offset - offset
                pwrite_all(handle, view[start:start + piece.length], piece.object_offset)
        except BaseException:
            self.undo()
            raise

    def _cut_tails(self, components: list[LayoutComponent], size: int, end: int) -> None:
        """Objects whose share of the file grows past ``size`` hold nothing past it."""
        for comp in components:
            for position, obj in enumerate(comp.objects):
                keep = object_bytes(comp, position, size)
                if object_bytes(comp, position, end) <= keep or obj.ost_index not in self.healthy:
                    continue
                try:
                    handle = self._handle(obj)
                except TargetUnavailable:
                    continue  # its OST is gone: no change leaves bytes there
                if os.fstat(handle).st_size > keep:
                    os.ftruncate(handle, keep)

    def undo(self) -> None:
        """Put back what the pieces written so far held (the last first)."""
        for handle, offset, before, old in reversed(self.done):
            try:
                pwrite_all(handle, old, offset)
                if os.fstat(handle).st_size > before:
                    os.ftruncate(handle, before)
            except OSError as err:
                log.error("store: %s: a failed write could not be undone: %s", self.layout.path,
                          err.strerror)
        self.done.clear()


def in_sync(component: LayoutComponent) -> bool:
    """Whether a component holds the file's bytes: instantiated and not marked stale (a mirror
    the scratch mount could not change is never read again, docs/mount.rst)."""
    return component.instantiated and "stale" not in component.flags.split(",")


def object_bytes(component: LayoutComponent, position: int, size: int) -> int:
    """Bytes object ``position`` holds of a file of ``size`` bytes (its last byte + 1), in
    constant time; object offsets grow with file offsets, so the object bytes of file bytes
    ``[a, b)`` are ``[object_bytes(a), object_bytes(b))``."""
    start = component.extent_start
    end = size if component.extent_end is None else min(component.extent_end, size)
    if end <= start:
        return 0
    stripe, round_size = component.stripe_size, component.stripe_size * component.stripe_count
    for rnd in range((end - 1) // round_size, start // round_size - 1, -1):
        lo = max(start, rnd * round_size + position * stripe)
        hi = min(end, rnd * round_size + (position + 1) * stripe)
        if hi > lo:
            return component.object_offset(hi - 1) + 1
    return 0


def span(component: LayoutComponent, start: int, end: int) -> tuple[int, int]:
    """The part of ``[start, end)`` inside the component's extent (empty when ``hi <= lo``)."""
    lo = max(start, component.extent_start)
    hi = end if component.extent_end is None else min(end, component.extent_end)
    return lo, hi


def directory_bytes(directory: Path) -> int:
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


class PatchWriter:
    """Writes patched bytes into one substitute object, bypassing the page cache where it can.

    A rebuild's bytes must be on disk before the layout switch anyway: written with
    ``O_DIRECT`` they stream to the disk while the next ranges are fetched, the final sync
    has only the device cache left to flush, and the rebuild takes no page cache from the
    jobs (nor pays for fresh pages). Bytes not aligned to :data:`DIRECT_ALIGN` (a file's
    last, short stripe) and file systems without ``O_DIRECT`` (tmpfs) go through the page
    cache, their writeback started at once. Bytes in memory that starts on a page boundary
    (``aligned``) are written as they are, others through a reused aligned buffer.

    Aligned pieces that follow each other in the object (a lost stripe's chunks, which are
    apart in the file and side by side in its substitute object) are gathered into one
    ``pwritev`` of up to :data:`DIRECT_RUN_BYTES`: the disk gets a few large requests at
    once instead of one chunk at a time. :meth:`flush` writes what is gathered; the caller
    flushes before it hands the buffers back.

    ``open_object(flags)`` opens the object (and raises the store's errors).
    """

    def __init__(self, open_object):
        self.open_object = open_object
        self.buffered: int | None = None
        self.direct: int | None = None
        self.direct_refused = not hasattr(os, "O_DIRECT")
        self.span: tuple[int, int] | None = None  # object bytes written through the page cache
        self.run: list[memoryview] = []  # aligned pieces gathered, contiguous in the object
        self.run_offset = 0
        self.run_bytes = 0

    def write(self, data: memoryview, object_offset: int, *, aligned: bool = False) -> None:
        if (not self.direct_refused and object_offset % DIRECT_ALIGN == 0
                and len(data) % DIRECT_ALIGN == 0):
            if aligned:
                self._gather(data, object_offset)
                return
            self.flush()
            try:
                self._write_staged(data, object_offset)
                return
            except OSError as err:
                self._refuse_direct(err)
        self.flush()
        self._write_buffered(data, object_offset)

    def _gather(self, data: memoryview, object_offset: int) -> None:
        if self.run and (object_offset != self.run_offset + self.run_bytes
                         or len(self.run) >= DIRECT_RUN_BUFFERS
                         or self.run_bytes + len(data) > DIRECT_RUN_BYTES):
            self.flush()
        if not self.run:
            self.run_offset = object_offset
        self.run.append(data)
        self.run_bytes += len(data)

    def flush(self) -> None:
        """Write the aligned pieces gathered (with ``O_DIRECT``, or through the page cache
        where the file system refuses it)."""
        run, offset = self.run, self.run_offset
        if not run:
            return
        self.run, self.run_bytes = [], 0
        if not self.direct_refused:
            try:
                if self.direct is None:
                    self.direct = self.open_object(os.O_WRONLY | os.O_DIRECT)
                pwritev_all(self.direct, run, offset)
                return
            except OSError as err:
                self._refuse_direct(err)
        for data in run:
            self._write_buffered(data, offset)
            offset += len(data)

    def _refuse_direct(self, err: OSError) -> None:
        if err.errno != errno.EINVAL:
            raise err
        log.info("store: O_DIRECT refused (%s); patching through the page cache", err.strerror)
        self.direct_refused = True

    def _write_buffered(self, data: memoryview, object_offset: int) -> None:
        if self.buffered is None:
            self.buffered = self.open_object(os.O_WRONLY)
        pwrite_all(self.buffered, data, object_offset)
        low, high = self.span or (object_offset, object_offset)
        self.span = (min(low, object_offset), max(high, object_offset + len(data)))

    def _write_staged(self, data: memoryview, object_offset: int) -> None:
        """``O_DIRECT`` from memory that does not start on a page: through an aligned buffer."""
        if self.direct is None:
            self.direct = self.open_object(os.O_WRONLY | os.O_DIRECT)
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
        self.flush()
        if self.buffered is not None and self.span is not None:
            _start_writeback(self.buffered, self.span[0], self.span[1] - self.span[0])

    def close(self) -> None:
        """Close the object (pieces gathered and not flushed are dropped: the caller failed)."""
        self.run, self.run_bytes = [], 0
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


def make_dir(directory: Path, *, mode: int = CLOSED_DIR_MODE, parents: bool = False) -> None:
    """Create a store directory with exactly ``mode`` whatever the umask: the MDT and OST
    directories 0700 (the store owner's alone), ``store_root`` 0755 (its entry names, which
    OSTs exist and which failed, are for everyone)."""
    try:
        directory.mkdir(mode=0o700, parents=parents)
    except FileExistsError:
        return
    os.chmod(directory, mode)


def close_dir(directory: Path, owner: tuple[int, int] | None) -> None:
    """Give an existing store directory mode :data:`CLOSED_DIR_MODE` and (when this process is
    root) ``owner``: the fix of a store made before directories were closed, on every
    read-write open by the store's owner (an ``fstat`` when there is nothing to fix)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        st = os.fstat(fd)
        if owner is not None and os.geteuid() == 0 and (st.st_uid, st.st_gid) != owner:
            os.fchown(fd, *owner)
        if statmod.S_IMODE(st.st_mode) != CLOSED_DIR_MODE:
            os.fchmod(fd, CLOSED_DIR_MODE)
            log.info("store: %s closed (mode %o)", directory, CLOSED_DIR_MODE)
    finally:
        os.close(fd)


def close_file(path: Path) -> None:
    """Give an existing file of the store (``namespace.db`` and its journal) mode 0600."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        if statmod.S_IMODE(os.fstat(fd).st_mode) != 0o600:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def _close_objects_in(dir_fd: int, directory: Path) -> int:
    changed = 0
    with os.scandir(dir_fd) as entries:
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
                if statmod.S_ISREG(st.st_mode) and statmod.S_IMODE(st.st_mode) != OBJECT_MODE:
                    # by name in a directory no other user can enter: nothing swaps it
                    os.chmod(entry.name, OBJECT_MODE, dir_fd=dir_fd)
                    changed += 1
            except FileNotFoundError:
                continue  # deleted meanwhile (a collection, a probe)
            except OSError as err:
                raise StorageError(f"{directory}/{entry.name}: cannot make the object "
                                   f"{OBJECT_MODE:o}: {err.strerror}") from None
    return changed


def is_link(name: str, dir_fd: int) -> bool:
    try:
        return statmod.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def unlink_imported(parent_fd: int, name: str, info: os.stat_result, full: str) -> None:
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


def fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
