"""GridFTP partial retrieval for :mod:`.ranged`: ``ftp://`` ranges on one control connection.

All the ranges of a request come in *one* transfer: extended block mode (``MODE E``), a
restart marker (``REST``) listing every byte range *not* wanted, then ``RETR``; the server
sends only the wanted ranges, each block headed by its file offset (GFD.20, the mechanism
GridFTP uses to resume a partial transfer). A server that refuses that gets
``ERET P <offset> <length>`` per range. Where the caller wants the server to vouch for the
bytes, ``CKSM <alg> <offset> <length> <path>`` checks each range.
"""

from __future__ import annotations

import bisect
import ftplib
import hashlib
import logging
import mmap
import socket
import struct
import zlib
from collections.abc import Iterator, Sequence
from urllib.parse import unquote, urlsplit

from ..errors import TransferError
from ..storage.layout import Extent
from .buffers import BufferPool
from .classify import is_permanent
from .reader import RangeData, RangedReader, RangeFailed, one_line
from .uri import Location

log = logging.getLogger(__name__)

FTP_DATA_BLOCK = 1 << 20
MODE_E_MAX_RANGES = 256  # ranges in one MODE E transfer (its REST line lists the gaps)
#: seconds a closing connection waits for the server's answer to QUIT
CLOSE_TIMEOUT = 2.0


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
                # a polite QUIT, but its answer is not worth a wait: a server busy with an
                # interrupted transfer may answer late, and a stopping daemon closes every
                # idle connection in turn (recoveryd must stop at once on SIGTERM)
                if self._ftp.sock is not None:
                    self._ftp.sock.settimeout(min(self.timeout, CLOSE_TIMEOUT))
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
