"""Reading a user's file into the store: only a regular file, only the bytes its size says.

``store put`` once streamed ``/dev/zero`` until the disk was full. Whatever the store reads
whole from a path a user names (``store put``, the import of a staged file) is opened here:
without blocking (a FIFO is not waited on), then checked on the opened descriptor, not on the
name (a name can be swapped after a check): anything but a regular file is refused. A file is
read as exactly the ``st_size`` bytes it had when opened; one that reads shorter or longer (a
``/proc`` or ``/sys`` file, whose sizes are 0 or a page whatever they hold, or a file still
being written) is refused, so no endless or lying source fills the store.

A full file system (``ENOSPC``, ``EDQUOT``) while the store writes is :class:`NoSpace`, one line.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat as statmod
from collections.abc import Iterator

from ..errors import InputError, PermissionDenied, StorageError
from ..inputfiles import READ_FLAGS

SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)

_KINDS = ((statmod.S_ISDIR, "a directory"), (statmod.S_ISCHR, "a character device"),
          (statmod.S_ISBLK, "a block device"), (statmod.S_ISFIFO, "a FIFO"),
          (statmod.S_ISSOCK, "a socket"), (statmod.S_ISLNK, "a symbolic link"))


class NoSpace(StorageError):
    """The store's file system is full (or the owner's quota used up)."""


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words (``a character device``...)."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def open_regular(name: str, *, label: str | None = None, dir_fd: int | None = None,
                 follow_links: bool = True) -> tuple[int, os.stat_result]:
    """Open ``name`` to read it whole: the descriptor and its ``fstat``, or :class:`InputError`
    for anything but a regular file (a link to one is followed unless ``follow_links`` is
    false). ``label`` names the file in errors (default ``name``)."""
    label = label or name
    flags = READ_FLAGS | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        raise InputError("no such file", path=label) from None
    except OSError as err:
        if err.errno == errno.ELOOP and not follow_links:
            raise InputError("is a symbolic link; refusing to follow it", path=label) from None
        if err.errno in (errno.EACCES, errno.EPERM):
            raise PermissionDenied(f"{label}: permission denied") from None
        if err.errno == errno.ENXIO:  # a socket, or a device without its driver
            raise InputError("is a socket or a device, not a regular file; only regular files "
                             "can be stored", path=label) from None
        raise InputError(f"cannot open: {err.strerror}", path=label) from None
    try:
        info = os.fstat(fd)
        if not statmod.S_ISREG(info.st_mode):
            raise InputError(f"is {kind_of(info.st_mode)}, not a regular file; only regular "
                             "files can be stored", path=label)
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def read_sized(fd: int, size: int, label: str, chunk: int) -> Iterator[tuple[int, bytes]]:
    """``(offset, bytes)`` of the ``size`` bytes of the open file ``fd``, ``chunk`` at a time;
    :class:`InputError` when the file holds fewer bytes, or more, than ``size``."""
    offset = 0
    while offset < size:
        data = _pread(fd, min(chunk, size - offset), offset, label)
        if not data:
            raise InputError(f"its size said {size} bytes but it ends at byte {offset} (a file "
                             "shrinking while it is read, or a /proc or /sys file)", path=label)
        yield offset, data
        offset += len(data)
    if _pread(fd, 1, size, label):
        raise InputError(f"holds more than the {size} bytes its size says (a file growing "
                         "while it is read, or a /proc or /sys file); not stored", path=label)


def _pread(fd: int, length: int, offset: int, label: str) -> bytes:
    try:
        return os.pread(fd, length, offset)
    except OSError as err:
        raise InputError(f"cannot read byte {offset}: {err.strerror}", path=label) from None


@contextlib.contextmanager
def space_errors(label: str) -> Iterator[None]:
    """Turn a full file system met while writing ``label`` into :class:`NoSpace`."""
    try:
        yield
    except OSError as err:
        if err.errno in SPACE_ERRNOS:
            raise NoSpace(f"{label}: the store's file system is full ({err.strerror}); nothing "
                          "of it was kept") from None
        raise
