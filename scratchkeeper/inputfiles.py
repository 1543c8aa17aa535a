"""Reading an input file a user or a site names (a config, a batch script, a trace, results).

Only a regular file is read: a device (``/dev/zero``), a FIFO or a folder named by mistake or
on purpose is refused with ``not a regular file`` instead of being read without end or
blocking. The check is made on the opened descriptor, not the name (a name can be swapped
between a check and an open), and the open itself does not wait on a FIFO.

A file read whole is read by :func:`read_limited`: at most its limit plus one byte, so a file
far larger than what it claims to be (a 3 GB "script") costs no more memory than the limit,
and is refused naming the line the limit falls on. :func:`decode_utf8` turns bytes that are not
UTF-8 into one error naming the line too. Bottom layer: imports only the exception root.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import IO, Any

from .errors import InputError

#: a file's name, as open() takes it
StrPath = str | os.PathLike[str]

#: flags of a file opened to be read whole on someone's behalf: a FIFO or a device must not
#: block the open, nor become the controlling terminal
READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC

#: bytes asked of the kernel per read of :func:`read_limited`
_CHUNK = 1 << 20


def regular_opener(name: StrPath, flags: int) -> int:
    """An ``opener`` for :func:`open`: opens without blocking on a FIFO, then refuses anything
    but a regular file with ``OSError(EINVAL, "not a regular file")``."""
    descriptor = os.open(name, flags | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        _check_mode(os.fstat(descriptor).st_mode)
        os.set_blocking(descriptor, True)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def open_regular(path: StrPath, mode: str = "rb", **options: Any) -> IO[Any]:
    """``open(path, mode, **options)`` for a regular file only (see :func:`regular_opener`)."""
    return open(path, mode, opener=regular_opener, **options)


def require_regular(path: StrPath) -> None:
    """Raise ``OSError(EINVAL, "not a regular file")`` unless ``path`` is a regular file (for
    readers that open by name, such as :func:`gzip.open`)."""
    _check_mode(os.stat(path).st_mode)


def _check_mode(mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise OSError(errno.EINVAL, "not a regular file")


def size_text(limit: int) -> str:
    """``4 MiB``, ``512 KiB`` or ``100 bytes``: a limit as errors state it."""
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if limit >= 1 << shift and limit % (1 << shift) == 0:
            return f"{limit >> shift} {unit}"
    return f"{limit} bytes"


def read_limited(path: StrPath, limit: int, *, what: str, error: type[InputError] = InputError) -> bytes:
    """The bytes of the regular file ``path``, which may hold at most ``limit`` of them.

    Errors are one ``error`` naming the file: ``cannot read: no such WHAT``, ``cannot read:
    not a regular file`` (a device, a FIFO, a folder, a socket), ``cannot read: <reason>``, and
    ``FILE:LINE: larger than LIMIT: not a WHAT`` where LINE holds the byte past the limit.
    Never more than ``limit + 1`` bytes are read, whatever the file's size says (a ``/proc``
    file's says 0)."""
    name = os.fspath(path)
    try:
        with open_regular(name, "rb", buffering=0) as stream:
            chunks: list[bytes] = []
            held = 0
            while held <= limit:
                chunk = stream.read(min(_CHUNK, limit + 1 - held))
                if not chunk:
                    break
                chunks.append(chunk)
                held += len(chunk)
    except FileNotFoundError:
        raise error(f"cannot read: no such {what}", path=name) from None
    except OSError as err:
        if err.errno == errno.ENXIO:  # a socket: open() itself refuses it
            raise error("cannot read: not a regular file", path=name) from None
        raise error(f"cannot read: {err.strerror or err}", path=name) from None
    data = b"".join(chunks)
    if len(data) > limit:
        raise error(f"larger than {size_text(limit)}: not a {what}", path=name,
                    line=data.count(b"\n", 0, limit) + 1)
    return data


def decode_utf8(data: bytes, path: StrPath, *, error: type[InputError] = InputError) -> str:
    """``data`` (read from ``path``) as UTF-8 text; else one ``error`` naming the line and
    column of the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise error(f"not UTF-8 text: byte 0x{data[err.start]:02x} at column {column}",
                    path=os.fspath(path), line=line) from None


def read_text(path: StrPath, limit: int, *, what: str, error: type[InputError] = InputError) -> str:
    """:func:`read_limited` then :func:`decode_utf8`: a text file a user names, read whole."""
    return decode_utf8(read_limited(path, limit, what=what, error=error), path, error=error)
