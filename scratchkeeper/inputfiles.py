"""Opening an input file a user or a site names (a config, a solve request, a trace).

Only a regular file is read: a device (``/dev/zero``), a FIFO or a folder named by mistake or
on purpose is refused with ``not a regular file`` instead of being read without end or
blocking. Bottom layer: imports nothing of the project.
"""

from __future__ import annotations

import errno
import os
import stat

#: flags of a file opened to be read whole on someone's behalf: a FIFO or a device must not
#: block the open, nor become the controlling terminal
READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def regular_opener(name, flags: int) -> int:
    """An ``opener`` for :func:`open`: opens without blocking on a FIFO, then refuses anything
    but a regular file with ``OSError(EINVAL, "not a regular file")``."""
    descriptor = os.open(name, flags | os.O_NONBLOCK)
    try:
        _check_mode(os.fstat(descriptor).st_mode)
        os.set_blocking(descriptor, True)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def open_regular(path, mode: str = "rb", **options):
    """``open(path, mode, **options)`` for a regular file only (see :func:`regular_opener`)."""
    return open(path, mode, opener=regular_opener, **options)


def require_regular(path) -> None:
    """Raise ``OSError(EINVAL, "not a regular file")`` unless ``path`` is a regular file (for
    readers that open by name, such as :func:`gzip.open`)."""
    _check_mode(os.stat(path).st_mode)


def _check_mode(mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise OSError(errno.EINVAL, "not a regular file")
