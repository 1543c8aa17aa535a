"""Ranged transfers: fetch byte ranges ``(offset, length)`` of a remote file (seed 004, 4.6.3).

One reader per source URI, chosen by scheme:

* ``ftp://`` (default ``eret``): GridFTP partial retrieval on one control connection. All the
  ranges of a request come in *one* transfer: extended block mode (``MODE E``), a restart
  marker (``REST``) listing every byte range *not* wanted, then ``RETR``; the server sends only
  the wanted ranges, each block headed by its file offset (GFD.20, the mechanism GridFTP uses
  to resume a partial transfer). A server that refuses that gets ``ERET P <offset> <length>``
  per range. Where the caller wants the server to vouch for the bytes,
  ``CKSM <alg> <offset> <length> <path>`` checks each range (the local GridFTP server offers it).
* ``gsiftp://`` (and ``ftp://`` with ``recovery.ftp_method = "globus-url-copy"``):
  ``globus-url-copy -partial-offset O -partial-length L`` per range into a private spool file
  (the client writes the range at offset O of a sparse file), then ``pread``. GSI needs the
  real client, so no range checksum here: the caller verifies against the whole-file checksum.
* ``http(s)://``: ``curl -r A-B`` with ``--next`` between ranges, so one process and one
  kept-alive connection serve a whole batch; each answer must be ``206 Partial Content``.
* ``file://`` and plain paths: ``pread``.

Failures raise :class:`TransferError`; ``permanent`` (missing file, permission denied, 4xx,
FTP 550/553/530, a server ignoring Range) means a retry cannot help.
"""

from __future__ import annotations

import abc
import bisect
import errno
import ftplib
import hashlib
import logging
import mmap
import os
import re
import shutil
import socket
import stat
import struct
import tempfile
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from ..config import TransferConfig
from ..errors import CommandError, CommandTimeout, PermissionDenied, TransferError
from ..ownership import READ_FLAGS, Owner, open_as
from ..runner import get_runner
from ..storage.layout import Extent
from .buffers import BufferPool
from .classify import is_permanent
from .uri import Location, UnknownScheme, parse_location

log = logging.getLogger(__name__)

FTP_DATA_BLOCK = 1 << 20
MODE_E_MAX_RANGES = 256  # ranges in one MODE E transfer (its REST line lists the gaps)


@dataclass(frozen=True)
class RangeData:
    """The bytes of one range and whether the server vouched for them (range checksum)."""

    extent: Extent
    data: bytes | bytearray | mmap.mmap  # mmap: a BufferPool's, to hand back once written
    verified: bool = False


class RangedReader(abc.ABC):
    """Fetches byte ranges of one source file; ``close`` releases connections and spool files."""

    #: True when every range returned is checked against a checksum the server computed
    verifies_ranges: bool = False
    client: str = "abstract"
    #: most extents worth handing to one :meth:`fetch` call
    batch_limit: int = 16

    def __init__(self, location: Location, *, timeout: float):
        self.location = location
        self.timeout = timeout

    @property
    def uri(self) -> str:
        return self.location.uri

    @abc.abstractmethod
    def size(self) -> int | None:
        """The source file's size in bytes, None if the protocol cannot tell (missing: permanent)."""

    def fetch(self, extents: Sequence[Extent], *, server_checksums: bool = True,
              buffers: BufferPool | None = None) -> Iterator[RangeData]:
        """Yield the bytes of each extent once, complete or not at all (in any order).

        ``server_checksums=False``: the caller checks the bytes itself (block digests recorded
        at stage-in), so a reader need not ask the server for range checksums. ``buffers``: a
        reader that receives into buffers of its own takes them there (the caller hands each
        back once written); others ignore it. A failure is a :class:`RangeFailed` naming the
        byte it happened at (where the reader cannot tell, the first byte asked for and not
        delivered).
        """
        _check_extents(extents)
        if not extents:
            return
        delivered: set[Extent] = set()
        try:
            for piece in self._fetch(extents, server_checksums=server_checksums,
                                     buffers=buffers):
                delivered.add(piece.extent)
                yield piece
        except RangeFailed:
            raise
        except TransferError as err:
            offset = next(e.offset for e in extents if e not in delivered)
            raise RangeFailed(f"{err} (at byte {offset})", offset,
                              permanent=err.permanent) from err

    @abc.abstractmethod
    def _fetch(self, extents: Sequence[Extent], *, server_checksums: bool = True,
               buffers: BufferPool | None = None) -> Iterator[RangeData]:
        """:meth:`fetch` without the naming of the failed byte (``extents`` checked, not
        empty); a reader that knows the exact byte raises :class:`RangeFailed` itself."""

    def whole_checksum(self, algorithm: str) -> str | None:
        """The server's checksum of the whole source (lower-case hex), None if it offers none."""
        return None

    def connect(self) -> None:
        """Open what a first request needs (a control connection), so that it can be done
        while the caller prepares the request; readers that connect per request do nothing."""

    @property
    def pool_key(self) -> str:
        """Idle readers with the same key may serve one another's requests."""
        return self.server or self.location.text

    @property
    def server(self) -> str | None:
        """Who this reader talks to, when one connection can serve several files (then idle
        readers with the same ``server`` are :meth:`retarget`-ed instead of opened anew)."""
        return None

    def retarget(self, location: Location) -> None:
        """Point an idle reader at another file of the same :attr:`server` (a reader without
        one serves only the file it was opened for)."""
        raise ValueError(f"{location.text}: a {self.client} reader serves only {self.uri}")

    def close(self) -> None:
        """Release what the reader holds (connections, spool files)."""

    def __enter__(self) -> RangedReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class RangeFailed(TransferError):
    """A ranged transfer failed at byte ``offset`` of the source."""

    def __init__(self, message: str, offset: int, *, permanent: bool = False):
        self.offset = offset
        super().__init__(message, permanent=permanent)


def open_ranged(uri: str, config: TransferConfig, *, ftp_method: str = "eret",
                timeout: float | None = None, spool_dir: str | None = None,
                range_checksum: str = "ADLER32", owner: Owner | None = None) -> RangedReader:
    """The ranged reader for ``uri`` (no connection is made until the first request).

    ``spool_dir`` is where globus-url-copy may write its partial files (recovery passes the
    scratch root, so it never writes outside it); default: the system's temporary directory.
    ``owner``: a local source (``file://``, a path) is opened with this user's rights (see
    :class:`PosixRangedReader`); default: this process's.
    """
    try:
        location = parse_location(uri)
    except UnknownScheme as err:
        raise TransferError(f"{uri}: unknown URI scheme {err}", permanent=True) from None
    except ValueError as err:
        raise TransferError(f"{uri}: {err}", permanent=True) from None
    limit = config.timeout if timeout is None else timeout
    if location.scheme in ("file", "path"):
        return PosixRangedReader(location, timeout=limit, owner=owner)
    if location.scheme in ("http", "https"):
        return CurlRangedReader(location, timeout=limit, config=config)
    if location.scheme == "ftp" and ftp_method in ("eret", "eret-per-range"):
        return EretRangedReader(location, timeout=limit, range_checksum=range_checksum,
                                many_ranges=ftp_method == "eret")
    if location.scheme in ("ftp", "gsiftp"):
        return GlobusRangedReader(location, timeout=limit, config=config, spool_dir=spool_dir)
    raise TransferError(f"{uri}: no ranged client for {location.scheme}:// (patch sources must "
                        "be gsiftp://, ftp://, http(s):// or file://)", permanent=True)


def one_line(message: str, limit: int = 300) -> str:
    """A client's multi-line complaint as one line: distinct lines joined, long ones cut."""
    seen: list[str] = []
    for line in message.splitlines():
        line = line.strip()
        if line and line not in seen:
            seen.append(line)
    text = "; ".join(seen)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _check_extents(extents: Sequence[Extent]) -> None:
    for extent in extents:
        if extent.offset < 0 or extent.length <= 0:
            raise ValueError(f"invalid range {extent.offset}+{extent.length}")


# -- file:// -----------------------------------------------------------------------------------
class PosixRangedReader(RangedReader):
    """``pread`` from a local (or NFS-mounted) source file, opened with its reader's rights.

    With ``owner`` (recoveryd, root, patching a user's file) the source is opened with that
    user's credentials (:func:`scratchkeeper.ownership.open_as`): a symbolic link or a path the
    user cannot read is refused as it would be for them. The path is resolved anew for every
    request (no descriptor is kept between them), and a missing file and one the user may not
    read get the same answer, which tells nothing about other users' files.
    """

    client = "pread"

    def __init__(self, location: Location, *, timeout: float, owner: Owner | None = None):
        super().__init__(location, timeout=timeout)
        self.owner = owner

    @property
    def pool_key(self) -> str:
        # a reader opens with its owner's rights: it serves only that owner
        return f"{self.location.text}#{self.owner.key if self.owner else 'self'}"

    def _open(self) -> int:
        """The source, opened now with the reader's rights; a regular file or refused."""
        who = f"uid {self.owner.uid}" if self.owner is not None else "this process"
        try:
            if self.owner is not None:
                fd = open_as(self.location.path, self.owner, timeout=self.timeout)
            else:
                fd = os.open(self.location.path, READ_FLAGS)
        except PermissionDenied as err:
            raise TransferError(str(err), permanent=True) from None
        except OSError as err:
            if err.errno in _UNREADABLE:
                # one answer for "missing" and "not yours": no oracle on others' files
                raise TransferError(f"{self.uri}: no such file, or not readable by {who}",
                                    permanent=True) from None
            raise TransferError(f"{self.uri}: {err.strerror}") from err
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise TransferError(f"{self.uri}: not a regular file (a device, FIFO or "
                                    "directory is never read as a source)", permanent=True)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def size(self) -> int:
        fd = self._open()
        try:
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def _fetch(self, extents: Sequence[Extent], *, server_checksums: bool = True,
               buffers: BufferPool | None = None) -> Iterator[RangeData]:
        fd = self._open()
        try:
            for extent in extents:
                parts, position = [], extent.offset
                while position < extent.end:
                    try:
                        block = os.pread(fd, extent.end - position, position)
                    except OSError as err:
                        raise RangeFailed(f"{self.uri}: read at byte {position}: "
                                          f"{err.strerror}", position) from err
                    if not block:
                        raise RangeFailed(f"{self.uri}: source ends at byte {position}, before "
                                          f"{extent.end}", position, permanent=True)
                    parts.append(block)
                    position += len(block)
                yield RangeData(extent, b"".join(parts))
        finally:
            os.close(fd)


#: errnos of an open that fails because the path is missing or the reader may not reach it
_UNREADABLE = frozenset({errno.ENOENT, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.ELOOP,
                         errno.ENAMETOOLONG})


# -- http(s):// --------------------------------------------------------------------------------
_WRITE_OUT = "%{stderr}sk-range %{http_code} %{size_download}\\n"
_WRITE_OUT_RE = re.compile(r"^sk-range (\d{3}) (\d+)$", re.MULTILINE)


class CurlRangedReader(RangedReader):
    """``curl -r`` per range, ``--next`` between them: one process and connection per batch."""

    client = "curl"

    def __init__(self, location: Location, *, timeout: float, config: TransferConfig):
        super().__init__(location, timeout=timeout)
        self.config = config

    def _per_url(self) -> list[str]:
        return ["--fail", "--silent", "--show-error", "--location", *self.config.curl_options]

    def size(self) -> int:
        argv = [self.config.curl, *self._per_url(), "--head", "--url", self.location.text]
        result = self._run(argv, text=True)
        lengths = re.findall(r"^content-length:\s*(\d+)", result.stdout, re.IGNORECASE | re.MULTILINE)
        if not lengths:
            raise TransferError(f"{self.uri}: the server does not say the file's size")
        return int(lengths[-1])

    def _run(self, argv: list[str], *, text: bool):
        try:
            result = get_runner().run(argv, timeout=self.timeout, check=False, mutating=False,
                                      text=text)
        except CommandTimeout as err:
            raise TransferError(f"{self.uri}: {err}") from err
        except CommandError as err:
            raise TransferError(f"{self.uri}: {err}", permanent=err.returncode == 127) from err
        if result.returncode != 0:
            stderr = result.stderr if text else result.stderr.decode(errors="replace")
            message = _WRITE_OUT_RE.sub("", stderr).strip() or f"curl exit {result.returncode}"
            raise TransferError(f"{self.uri}: {one_line(message)}", permanent=is_permanent(message))
        return result

    def _fetch(self, extents: Sequence[Extent], *, server_checksums: bool = True,
               buffers: BufferPool | None = None) -> Iterator[RangeData]:
        argv = [self.config.curl]
        for index, extent in enumerate(extents):
            if index:
                argv.append("--next")
            argv += [*self._per_url(), "--range", f"{extent.offset}-{extent.end - 1}",
                     "--write-out", _WRITE_OUT, "--url", self.location.text]
        result = self._run(argv, text=False)
        answers = _WRITE_OUT_RE.findall(result.stderr.decode(errors="replace"))
        if len(answers) != len(extents):
            raise TransferError(f"{self.uri}: curl answered {len(answers)} of {len(extents)} "
                                "ranges")
        body = memoryview(result.stdout)
        position = 0
        for extent, (code, size) in zip(extents, answers):
            if code != "206":
                # a 200 is the whole file: the server ignores Range and cannot patch
                raise TransferError(f"{self.uri}: HTTP {code} to a Range request; the server "
                                    "does not serve byte ranges", permanent=True)
            if int(size) != extent.length:
                raise TransferError(f"{self.uri}: asked bytes {extent.offset}+{extent.length}, "
                                    f"got {size} (source shorter than recorded?)",
                                    permanent=int(size) < extent.length)
            yield RangeData(extent, bytes(body[position:position + extent.length]))
            position += extent.length


# -- ftp:// through ERET -----------------------------------------------------------------------
class EretRangedReader(RangedReader):
    """GridFTP partial retrieval on one control connection: many ranges per transfer (MODE E
    with a restart marker), or ``ERET P`` per range; verified by ``CKSM`` when asked.

    ``range_checksum`` ADLER32 (default) catches corruption in transit at a fraction of MD5's
    cost on both ends; whether the source is still what was staged is a separate, whole-file
    SHA-256 question (:meth:`whole_checksum`).
    """

    client = "eret"
    batch_limit = MODE_E_MAX_RANGES

    def __init__(self, location: Location, *, timeout: float, range_checksum: str = "ADLER32",
                 many_ranges: bool = True):
        super().__init__(location, timeout=timeout)
        if range_checksum not in _RANGE_DIGESTS:
            raise ValueError(f"range checksum {range_checksum!r}: expected ADLER32 or MD5")
        self.range_checksum = range_checksum
        self.host, self.port, self.user, self.password = _ftp_login(location)
        self._ftp: ftplib.FTP | None = None
        self._cksm: bool | None = None
        # None: not tried yet; False: refused (or not wanted), use ERET P per range
        self._mode_e: bool | None = None if many_ranges else False
        if not many_ranges:
            self.batch_limit = RangedReader.batch_limit
        self._mode: str = "S"  # the transfer mode the control connection is in
        self._size: int | None = None
        self.verifies_ranges = True  # until the server turns CKSM down

    def _connect(self) -> ftplib.FTP:
        if self._ftp is None:
            ftp = ftplib.FTP()
            try:
                ftp.connect(self.host, self.port, timeout=self.timeout)
                ftp.login(self.user, self.password)
                ftp.voidcmd("TYPE I")
            except BaseException as err:
                _quiet_close(ftp)
                raise _ftp_error(self.uri, err) from err
            self._ftp = ftp
        return self._ftp

    def connect(self) -> None:
        self.size()  # connects, logs in, and learns the size a MODE E request needs

    @property
    def server(self) -> str:
        # the credentials are part of it: a connection logged in as one user serves only them
        return f"ftp://{self.user}:{self.password}@{self.host}:{self.port}"

    def retarget(self, location: Location) -> None:
        """Fetch from another file on the same connection (FTP logs in once per connection)."""
        if _ftp_login(location) != (self.host, self.port, self.user, self.password):
            raise ValueError(f"{location.text}: not a file of this reader's server")
        self.location = location
        self._size = None

    def size(self) -> int:
        ftp = self._connect()
        try:
            answer = ftp.sendcmd(f"SIZE {self.location.path}")
        except BaseException as err:
            self._drop()
            raise _ftp_error(self.uri, err) from err
        self._size = int(answer.split()[-1])
        return self._size

    def whole_checksum(self, algorithm: str) -> str | None:
        if self._cksm is False:
            return None
        ftp = self._connect()
        try:
            answer = ftp.sendcmd(f"CKSM {algorithm} 0 -1 {self.location.path}")
        except ftplib.error_perm as err:
            if str(err)[:3] in ("500", "501", "502", "504") and not is_permanent(str(err)):
                return None
            self._drop()
            raise _ftp_error(self.uri, err) from err
        except BaseException as err:
            self._drop()
            raise _ftp_error(self.uri, err) from err
        return answer.split()[-1].lower()

    def _range_checksum(self, ftp: ftplib.FTP, extent: Extent) -> str | None:
        if self._cksm is False:
            return None
        try:
            answer = ftp.sendcmd(f"CKSM {self.range_checksum} {extent.offset} {extent.length} "
                                 f"{self.location.path}")
        except ftplib.error_perm as err:
            if str(err)[:3] in ("500", "501", "502", "504"):
                log.info("%s: the server offers no CKSM (%s); verifying whole files", self.uri,
                         str(err).strip())
                self._cksm = False
                self.verifies_ranges = False
                return None
            raise
        self._cksm = True
        return answer.split()[-1].lower()

    def _fetch(self, extents: Sequence[Extent], *, server_checksums: bool = True,
               buffers: BufferPool | None = None) -> Iterator[RangeData]:
        if self._mode_e is not False:
            try:
                yield from self._fetch_mode_e(extents, server_checksums, buffers)
                return
            except _ModeERefused as refused:
                log.info("%s: the server refuses ranged MODE E transfers (%s); one ERET per "
                         "range", self.uri, refused)
                self._mode_e = False
        yield from self._fetch_eret(extents, server_checksums)

    # one transfer for many ranges: MODE E, REST <ranges not wanted>, RETR
    def _fetch_mode_e(self, extents: Sequence[Extent], server_checksums: bool,
                      buffers: BufferPool | None = None) -> Iterator[RangeData]:
        wanted = sorted(extents)
        for before, after in zip(wanted, wanted[1:]):
            if after.offset < before.end:
                raise ValueError(f"overlapping ranges {before.offset}+{before.length} and "
                                 f"{after.offset}+{after.length}")
        size = self._size if self._size is not None else self.size()
        if wanted[-1].end > size:
            raise TransferError(f"{self.uri}: asked bytes up to {wanted[-1].end}, the source "
                                f"has {size} (shorter than recorded?)", permanent=True)
        skip, position = [], 0
        for extent in wanted:
            if extent.offset > position:
                skip.append(f"{position}-{extent.offset}")
            position = extent.end
        if position < size:
            skip.append(f"{position}-{size}")
        ftp = self._connect()
        listener = None
        receiver = None
        data_socks: list[socket.socket] = []
        finished = False
        try:
            try:
                if self._mode != "E":
                    ftp.voidcmd("MODE E")
                    self._mode = "E"
                host = ftp.sock.getsockname()[0]
                listener = socket.create_server((host, 0), family=ftp.af, backlog=4)
                listener.settimeout(self.timeout)
                port = listener.getsockname()[1]
                if ftp.af == socket.AF_INET:
                    ftp.sendport(host, port)
                else:
                    ftp.sendeprt(host, port)
                if skip:
                    # "REST a-b,c-d": the bytes [a, b), [c, d) are already here; send the rest
                    answer = ftp.sendcmd("REST " + ",".join(skip))
                    if not answer.startswith("350"):
                        raise ftplib.error_reply(answer)
            except ftplib.error_perm as err:
                if str(err)[:3] in ("500", "501", "502", "504") and not is_permanent(str(err)):
                    self._drop()
                    raise _ModeERefused(str(err).strip()) from None
                raise
            answer = ftp.sendcmd(f"RETR {self.location.path}")
            if not answer.startswith("1"):
                raise ftplib.error_reply(answer)
            # extents are kept to the end only when the server must vouch for them afterwards
            receiver = _ModeEReceiver(self.uri, wanted, keep=server_checksums, buffers=buffers)
            peer = ftp.sock.getpeername()[0]
            while not receiver.done():
                conn, address = listener.accept()
                if address[0] != peer:  # someone else raced for the data port
                    conn.close()
                    raise TransferError(f"{self.uri}: a data connection came from {address[0]}, "
                                        f"not the server {peer}")
                conn.settimeout(self.timeout)
                data_socks.append(conn)
                for extent, data in receiver.receive(conn):
                    if not server_checksums:
                        yield RangeData(extent, data, False)
                conn.close()
            ftp.voidresp()
            receiver.check_complete()
            if server_checksums:
                for extent, data in receiver.completed:
                    yield self._compare(extent, data, self._range_checksum(ftp, extent))
            finished = True
        except _ModeERefused:
            raise
        except GeneratorExit:
            raise
        except BaseException as err:
            error = _ftp_error(self.uri, err)
            at = receiver.position if receiver is not None else None
            if at is not None and isinstance(error, TransferError) \
                    and not isinstance(error, RangeFailed):
                error = RangeFailed(f"{error} (at byte {at})", at, permanent=error.permanent)
            raise error from err
        finally:
            for conn in data_socks:
                _quiet_close_socket(conn)
            if listener is not None:
                _quiet_close_socket(listener)
            if not finished:
                self._drop()  # mid-transfer: the control connection's state is unknown

    def _compare(self, extent: Extent, data: bytearray, expected: str | None) -> RangeData:
        """The range, verified if the server gave its checksum (``expected``); raise if it differs."""
        if expected is None:
            return RangeData(extent, data, False)
        if _RANGE_DIGESTS[self.range_checksum](data) != expected.lstrip("0"):
            raise TransferError(f"{self.uri}: bytes {extent.offset}+{extent.length} arrived "
                                f"corrupted ({self.range_checksum} differs from the server's "
                                "CKSM)")
        return RangeData(extent, data, True)

    # one ERET per range, in stream mode
    def _fetch_eret(self, extents: Sequence[Extent], server_checksums: bool
                    ) -> Iterator[RangeData]:
        for extent in extents:
            ftp = self._connect()
            if self._mode != "S":
                try:
                    ftp.voidcmd("MODE S")
                except BaseException as err:
                    self._drop()
                    raise _ftp_error(self.uri, err) from err
                self._mode = "S"
            try:
                data = self._retrieve(ftp, extent)
                expected = self._range_checksum(ftp, extent) if server_checksums else None
            except BaseException as err:
                self._drop()
                raise _ftp_error(self.uri, err) from err
            if len(data) != extent.length:
                raise TransferError(f"{self.uri}: asked bytes {extent.offset}+{extent.length}, "
                                    f"got {len(data)} (source shorter than recorded?)",
                                    permanent=len(data) < extent.length)
            yield self._compare(extent, data, expected)

    def _retrieve(self, ftp: ftplib.FTP, extent: Extent) -> bytearray:
        """One ``ERET P`` received straight into a buffer of the range's size."""
        buffer = bytearray(extent.length)
        view = memoryview(buffer)
        received = 0
        with ftp.transfercmd(f"ERET P {extent.offset} {extent.length} {self.location.path}") as conn:
            conn.settimeout(self.timeout)
            while received < extent.length:
                count = conn.recv_into(view[received:received + FTP_DATA_BLOCK])
                if not count:
                    break
                received += count
            extra = conn.recv(1) if received == extent.length else b""
        ftp.voidresp()
        if extra:
            raise TransferError(f"{self.uri}: the server sent more than bytes {extent.offset}+"
                                f"{extent.length}")
        del view
        if received < extent.length:
            del buffer[received:]
        return buffer

    def _drop(self) -> None:
        if self._ftp is not None:
            _quiet_close(self._ftp)
            self._ftp = None
        self._mode = "S"

    def close(self) -> None:
        if self._ftp is not None:
            try:
                self._ftp.quit()
            except (OSError, EOFError, ftplib.Error):
                pass
            self._drop()


def _ftp_login(location: Location) -> tuple[str, int, str, str]:
    """Host, port, user and password of an ftp:// location (anonymous unless it names one)."""
    parts = urlsplit(location.text)
    return (parts.hostname or "", parts.port or 21,
            unquote(parts.username) if parts.username else "anonymous",
            unquote(parts.password) if parts.password else "scratchkeeper@")


class _ModeERefused(Exception):
    """The server does not do ranged MODE E transfers (fall back to ERET per range)."""


# MODE E block header (GFD.20): descriptor, byte count, file offset
_HEADER = struct.Struct(">BQQ")
_EOF, _SUSPECT, _RESTART, _EOD = 0x40, 0x20, 0x10, 0x08


class _ModeEReceiver:
    """Reassembles the extended-block stream of one transfer into the wanted extents."""

    def __init__(self, uri: str, wanted: list[Extent], *, keep: bool = True,
                 buffers: BufferPool | None = None):
        self.uri = uri
        self.keep = keep
        self.pool = buffers
        self.wanted = wanted
        self.starts = [e.offset for e in wanted]
        self.buffers: dict[int, bytearray | mmap.mmap] = {}
        self.filled: dict[int, int] = {}
        self.completed: list[tuple[Extent, bytearray]] = []
        self.eods = 0
        self.eods_expected: int | None = None
        self.position: int | None = None  # the file byte being received (errors name it)

    def done(self) -> bool:
        return self.eods_expected is not None and self.eods >= self.eods_expected

    def receive(self, conn: socket.socket) -> Iterator[tuple[Extent, bytearray]]:
        """Read one data connection up to its EOD; yield each extent as it completes."""
        header = bytearray(_HEADER.size)
        while True:
            _recv_exactly(conn, memoryview(header), self.uri)
            descriptor, count, offset = _HEADER.unpack(header)
            if descriptor & _SUSPECT:
                raise TransferError(f"{self.uri}: the server marks the data it sent as suspect")
            if descriptor & _RESTART:
                _discard(conn, count, self.uri)  # a restart marker, not file data
            elif count:
                yield from self._block(conn, offset, count)
            if descriptor & _EOF:
                self.eods_expected = offset  # an EOF block's offset field is the EOD count
            if descriptor & _EOD:
                self.eods += 1
                return

    def _block(self, conn: socket.socket, offset: int, count: int
               ) -> Iterator[tuple[Extent, bytearray]]:
        end = offset + count
        while offset < end:
            index = bisect.bisect_right(self.starts, offset) - 1
            extent = self.wanted[index] if index >= 0 else None
            if extent is None or offset >= extent.end:
                raise TransferError(f"{self.uri}: the server sent byte {offset}, which was not "
                                    "asked for")
            take = min(end, extent.end) - offset
            buffer = self.buffers.get(index)
            if buffer is None:
                buffer = self.buffers[index] = (self.pool.take(extent.length) if self.pool
                                                else bytearray(extent.length))
                self.filled[index] = 0
            start = offset - extent.offset
            self.position = offset
            _recv_exactly(conn, memoryview(buffer)[start:start + take], self.uri, offset)
            self.filled[index] += take
            offset += take
            if self.filled[index] == extent.length:
                del self.buffers[index]
                self.filled[index] = -1  # complete: a byte more would be a duplicate
                if self.keep:
                    self.completed.append((extent, buffer))
                yield extent, buffer
            elif self.filled[index] > extent.length or self.filled[index] < 0:
                raise TransferError(f"{self.uri}: the server sent bytes of "
                                    f"{extent.offset}+{extent.length} twice")

    def check_complete(self) -> None:
        missing = [e for i, e in enumerate(self.wanted) if self.filled.get(i) != -1]
        if missing:
            raise TransferError(f"{self.uri}: the transfer ended without "
                                f"{sum(e.length for e in missing)} of the bytes asked for "
                                f"(from {missing[0].offset}); source shorter than recorded?")


def _recv_exactly(conn: socket.socket, view: memoryview, uri: str,
                  offset: int | None = None) -> None:
    """Fill ``view``; ``offset``: the file byte its start holds (named if the data stops)."""
    received = 0
    while received < len(view):
        count = conn.recv_into(view[received:])
        if not count:
            if offset is None:
                raise TransferError(f"{uri}: the data connection closed in the middle of a block")
            raise RangeFailed(f"{uri}: the data connection closed in the middle of a block, at "
                              f"byte {offset + received}", offset + received)
        received += count


def _discard(conn: socket.socket, count: int, uri: str) -> None:
    scratch = bytearray(min(count, 1 << 16))
    while count:
        chunk = memoryview(scratch)[:min(count, len(scratch))]
        _recv_exactly(conn, chunk, uri)
        count -= len(chunk)


def _quiet_close_socket(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass


_RANGE_DIGESTS = {
    # compared without leading zeros: servers differ in padding ADLER32 to 8 digits
    "ADLER32": lambda data: format(zlib.adler32(data), "x"),
    "MD5": lambda data: hashlib.md5(data).hexdigest().lstrip("0"),
}


def _quiet_close(ftp: ftplib.FTP) -> None:
    try:
        ftp.close()
    except OSError:
        pass


def _ftp_error(uri: str, err: BaseException) -> BaseException:
    """An FTP failure as a TransferError: 5xx answers are permanent, the rest may pass."""
    if isinstance(err, TransferError) or not isinstance(err, Exception):
        return err
    if isinstance(err, ftplib.error_perm):
        message = str(err).strip()
        return TransferError(f"{uri}: {one_line(message)}", permanent=is_permanent(message)
                             or message[:3] in ("550", "553", "530", "501"))
    if isinstance(err, (socket.timeout, TimeoutError)):
        return TransferError(f"{uri}: no answer within the transfer timeout")
    if isinstance(err, (OSError, EOFError, ftplib.Error)):
        return TransferError(f"{uri}: {err.__class__.__name__}: {err}".rstrip(": "))
    return err


# -- gsiftp:// (and ftp://) through globus-url-copy --------------------------------------------
class GlobusRangedReader(RangedReader):
    """``globus-url-copy -partial-offset/-partial-length`` per range into a private spool file."""

    client = "globus-url-copy"

    def __init__(self, location: Location, *, timeout: float, config: TransferConfig,
                 spool_dir: str | None = None):
        super().__init__(location, timeout=timeout)
        self.config = config
        self.spool_dir = spool_dir
        self._spool: str | None = None

    def _spool_file(self) -> str:
        if self._spool is None:
            # 0700; the pid in the name lets a restart tell a dead process's spool from a live one's
            self._spool = tempfile.mkdtemp(prefix=f"{SPOOL_PREFIX}{os.getpid()}-",
                                           dir=self.spool_dir)
        return os.path.join(self._spool, "range")

    def _run(self, argv: list[str]) -> None:
        try:
            get_runner().run(argv, timeout=self.timeout, mutating=False)
        except CommandTimeout as err:
            raise TransferError(f"{self.uri}: {err}") from err
        except CommandError as err:
            message = (err.stderr or err.stdout or str(err)).strip()
            raise TransferError(f"{self.uri}: {one_line(message)}",
                                permanent=is_permanent(message) or err.returncode == 127) from err

    def size(self) -> int | None:
        # globus-url-copy has no stat: the caller relies on the size recorded at stage-in
        return None

    def _fetch(self, extents: Sequence[Extent], *, server_checksums: bool = True,
               buffers: BufferPool | None = None) -> Iterator[RangeData]:
        target = self._spool_file()
        for extent in extents:
            _remove(target)
            self._run([self.config.globus_url_copy, *self.config.globus_url_copy_options,
                       "-partial-offset", str(extent.offset),
                       "-partial-length", str(extent.length),
                       self.location.text, "file://" + target])
            try:
                fd = os.open(target, os.O_RDONLY)
            except FileNotFoundError:
                raise TransferError(f"{self.uri}: globus-url-copy wrote nothing for bytes "
                                    f"{extent.offset}+{extent.length}", permanent=True) from None
            try:
                end = os.fstat(fd).st_size
                if end < extent.end:
                    raise TransferError(f"{self.uri}: asked bytes {extent.offset}+"
                                        f"{extent.length}, the source ends at {end}",
                                        permanent=True)
                data = os.pread(fd, extent.length, extent.offset)
            finally:
                os.close(fd)
            yield RangeData(extent, data)
        self.close()  # no spool left behind between requests (readers are pooled)

    def close(self) -> None:
        if self._spool is not None:
            shutil.rmtree(self._spool, ignore_errors=True)
            self._spool = None


SPOOL_PREFIX = ".sk-ranged-"


def remove_stale_spools(spool_dir: str) -> list[str]:
    """Remove the spool folders in ``spool_dir`` left by processes that died (a kill -9 in the
    middle of a globus-url-copy patch); the paths removed.

    A folder whose name carries a live process's pid other than this one is left alone (an
    inline ``recover`` may be using it); this process's own pid in a name means a dead process
    had it before, since a restarted daemon has none yet.
    """
    removed = []
    try:
        entries = list(os.scandir(spool_dir))
    except OSError as err:
        log.warning("%s: cannot list leftover spool folders: %s", spool_dir, err.strerror)
        return removed
    for entry in entries:
        if not entry.name.startswith(SPOOL_PREFIX) or not entry.is_dir(follow_symlinks=False):
            continue
        pid_text = entry.name[len(SPOOL_PREFIX):].partition("-")[0]
        if pid_text.isdigit() and int(pid_text) != os.getpid() and _alive(int(pid_text)):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        if not os.path.lexists(entry.path):
            removed.append(entry.path)
    if removed:
        log.info("%s: removed %d spool folder(s) left by a dead process", spool_dir, len(removed))
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def measure(reader: RangedReader, extent: Extent) -> tuple[float, float]:
    """Latency (seconds, an empty-ish first byte) and throughput (bytes/s) of one source.

    Latency is the time of a one-byte range; throughput that of ``extent`` minus the latency.
    """
    started = time.monotonic()
    for _ in reader.fetch([Extent(extent.offset, 1)]):
        pass
    latency = time.monotonic() - started
    started = time.monotonic()
    for _ in reader.fetch([extent]):
        pass
    elapsed = max(time.monotonic() - started - latency, 1e-6)
    return latency, extent.length / elapsed
