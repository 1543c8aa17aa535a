"""Recovery never writes outside the scratch root and never follows a symlink out of it."""

from __future__ import annotations

import errno
import os
import stat

from ..errors import InputError, PermissionDenied


def check_inside_scratch(full: str, scratch_root: str) -> None:
    """Refuse ``full`` if, with every symbolic link on the way resolved, it leaves the root.

    The path itself need not exist (the local store's files live in its namespace); the
    directories it names are checked as far as they exist.
    """
    root = os.path.realpath(scratch_root)
    real = os.path.realpath(full)
    if real != root and not real.startswith(root.rstrip("/") + "/"):
        raise InputError(f"{full}: leads outside the scratch root {root} (through a symbolic "
                         "link); refusing to touch it")
    if os.path.islink(full):
        raise InputError(f"{full}: is a symbolic link; refusing to follow it")


def open_owned(path: str, uid: int) -> int:
    """Open the regular file ``path`` for reading on behalf of ``uid``; the descriptor.

    For a privileged service acting for a user on a path that user can change: the last
    component is opened without following a link, and the file the kernel actually opened must
    be at ``path`` (its directories resolved when the request came in; a directory swapped for a
    link in between shows up here) and be owned by ``uid``. The caller closes the descriptor.
    """
    expected = os.path.realpath(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise InputError(f"{path}: is a symbolic link; refusing to follow it") from None
        raise InputError(f"{path}: cannot open: {err.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"{path}: not a regular file")
        actual = os.readlink(f"/proc/self/fd/{fd}")
        if actual != expected:
            raise InputError(f"{path}: changed while it was being opened (now {actual}); "
                             "refusing it")
        if info.st_uid != uid:
            raise PermissionDenied(f"{path}: owned by uid {info.st_uid}, not by uid {uid}")
    except BaseException:
        os.close(fd)
        raise
    return fd
