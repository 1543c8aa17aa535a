"""Ranged transfers: fetch byte ranges ``(offset, length)`` of a remote file (the thesis, §4.6.3).

One reader per source URI, chosen by scheme:

* ``ftp://`` (default ``eret``): GridFTP partial retrieval on one control connection, all the
  ranges of a request in one ``MODE E`` transfer, ``ERET P`` per range where the server
  refuses that, ``CKSM`` per range where the caller wants the server to vouch for the bytes
  (:mod:`.gridftp`).
* ``gsiftp://`` (and ``ftp://`` with ``recovery.ftp_method = "globus-url-copy"``):
  ``globus-url-copy -partial-offset O -partial-length L`` per range into a private spool file
  (the client writes the range at offset O of a sparse file), then ``pread``. GSI needs the
  real client, so no range checksum here: the caller verifies against the whole-file checksum.
  A source URL with a raw wildcard is refused and the spool is a percent-encoded ``file://``
  URL (:mod:`.clients`), so the client reads and writes exactly the files named.
* ``http(s)://``: ``curl -r A-B`` with ``--next`` between ranges, so one process and one
  kept-alive connection serve a whole batch; each answer must be ``206 Partial Content``. The
  planner's curl options apply (``--globoff``: a ``{a,b}`` or ``[1-9]`` is part of the name).
  curl follows no redirect: a 3xx is followed by the reader only where its caller's policy
  allows the target, each hop checked (:mod:`.redirects`), else it is an error.
* ``file://`` and plain paths: ``pread``, the file opened with its owner's rights when the
  caller acts for a user (:class:`PosixRangedReader`).

Every reader keeps the contract of :mod:`.reader`. Failures raise :class:`RangeFailed` (a
:class:`TransferError`) naming the byte; ``permanent`` (missing file, permission denied, 4xx,
FTP 550/553/530, a server ignoring Range) means a retry cannot help.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from ..config import TransferConfig
from ..errors import CommandError, CommandTimeout, PermissionDenied, TransferError
from ..inputfiles import READ_FLAGS
from ..ownership import Owner, open_as
from ..runner import get_runner
from ..storage.layout import Extent
from .buffers import BufferPool
from .classify import is_permanent
from .clients import ExpandedName, curl_argv, curl_url_options, file_url, globus_url, http_url
from .gridftp import EretRangedReader
from .reader import RangeData, RangedReader, RangeFailed, one_line
from .redirects import RedirectPolicy, is_redirect, next_hop
from .uri import Location, UnknownScheme, parse_location

log = logging.getLogger(__name__)


def open_ranged(uri: str, config: TransferConfig, *, ftp_method: str = "eret",
                timeout: float | None = None, spool_dir: str | None = None,
                range_checksum: str = "ADLER32", owner: Owner | None = None,
                redirects: RedirectPolicy | None = None) -> RangedReader:
    """The ranged reader for ``uri`` (no connection is made until the first request).

    ``spool_dir`` is where globus-url-copy may write its partial files (recovery passes the
    scratch root, so it never writes outside it); default: the system's temporary directory.
    ``owner``: a local source (``file://``, a path) is opened with this user's rights (see
    :class:`PosixRangedReader`); default: this process's. ``redirects``: which HTTP redirect
    targets may be followed (:mod:`.redirects`; root passes the allow-list that checked
    ``uri``); default: none, a 3xx answer is an error naming where it pointed.
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
        return CurlRangedReader(location, timeout=limit, config=config, redirects=redirects)
    if location.scheme == "ftp" and ftp_method in ("eret", "eret-per-range"):
        return EretRangedReader(location, timeout=limit, range_checksum=range_checksum,
                                many_ranges=ftp_method == "eret")
    if location.scheme in ("ftp", "gsiftp"):
        return GlobusRangedReader(location, timeout=limit, config=config, spool_dir=spool_dir)
    raise TransferError(f"{uri}: no ranged client for {location.scheme}:// (patch sources must "
                        "be gsiftp://, ftp://, http(s):// or file://)", permanent=True)


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
_WRITE_OUT = "%{stderr}sk-range %{http_code} %{size_download} %{redirect_url}\\n"
_WRITE_OUT_RE = re.compile(r"^sk-range (\d{3}) (\d+) ?(.*)$", re.MULTILINE)


class CurlRangedReader(RangedReader):
    """``curl -r`` per range, ``--next`` between them: one process and connection per batch.

    curl follows no redirect here: a 3xx answer's target is followed by the reader, each hop
    checked by ``redirects`` first (:mod:`.redirects`; None: a 3xx is an error)."""

    client = "curl"

    def __init__(self, location: Location, *, timeout: float, config: TransferConfig,
                 redirects: RedirectPolicy | None = None):
        super().__init__(location, timeout=timeout)
        self.config = config
        self.redirects = redirects

    def _per_url(self) -> list[str]:
        # the planner's curl options (--globoff...): the URL is fetched as the name it is;
        # --no-location after the site's: where a 3xx points is checked here, not followed
        return curl_url_options(self.config, follow=False)

    def size(self) -> int:
        url, hops = http_url(self.location), 0
        while True:  # next_hop ends it past MAX_REDIRECTS
            argv = [*curl_argv(self.config), *self._per_url(), "--head", "--write-out",
                    _WRITE_OUT, "--url", url]
            result = self._run(argv, text=True)
            answer = _WRITE_OUT_RE.search(result.stderr)
            if answer is not None and is_redirect(answer.group(1)):
                url = next_hop(self.uri, url, answer.group(1), answer.group(3).strip(),
                               self.redirects, hops)
                hops += 1
                continue
            lengths = re.findall(r"^content-length:\s*(\d+)", result.stdout,
                                 re.IGNORECASE | re.MULTILINE)
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
        # each range follows its own redirects (a server may send each request elsewhere)
        pending = [(extent, http_url(self.location)) for extent in extents]
        hops = 0
        while pending:  # next_hop ends it past MAX_REDIRECTS
            moved = []
            for extent, url, code, target, data in self._batch(pending):
                if is_redirect(code):
                    moved.append((extent, next_hop(self.uri, url, code, target, self.redirects,
                                                   hops)))
                    continue
                if code != "206":
                    # a 200 is the whole file: the server ignores Range and cannot patch
                    raise TransferError(f"{self.uri}: HTTP {code} to a Range request; the "
                                        "server does not serve byte ranges", permanent=True)
                if len(data) != extent.length:
                    raise TransferError(f"{self.uri}: asked bytes {extent.offset}+"
                                        f"{extent.length}, got {len(data)} (source shorter "
                                        "than recorded?)", permanent=len(data) < extent.length)
                yield RangeData(extent, bytes(data))
            pending, hops = moved, hops + 1

    def _batch(self, pending: list[tuple[Extent, str]]
               ) -> list[tuple[Extent, str, str, str, memoryview]]:
        """One curl run for ``pending`` (range, URL) pairs: per pair, its URL, the answer's
        status, where a 3xx points ("" if nowhere) and the body."""
        argv = curl_argv(self.config)
        for index, (extent, url) in enumerate(pending):
            if index:
                argv.append("--next")
            argv += [*self._per_url(), "--range", f"{extent.offset}-{extent.end - 1}",
                     "--write-out", _WRITE_OUT, "--url", url]
        result = self._run(argv, text=False)
        answers = _WRITE_OUT_RE.findall(result.stderr.decode(errors="replace"))
        if len(answers) != len(pending):
            raise TransferError(f"{self.uri}: curl answered {len(answers)} of {len(pending)} "
                                "ranges")
        body = memoryview(result.stdout)
        found, position = [], 0
        for (extent, url), (code, size, target) in zip(pending, answers):
            # a 3xx answer's body is on stdout too: every answer is cut at its own size
            found.append((extent, url, code, target.strip(), body[position:position + int(size)]))
            position += int(size)
        if position != len(body):
            raise TransferError(f"{self.uri}: curl wrote {len(body)} bytes for answers of "
                                f"{position}")
        return found


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
        try:
            # a wildcard would read another file than the one recorded: refused, not expanded
            source = globus_url(self.location)
        except ExpandedName as err:
            raise TransferError(str(err), permanent=True) from None
        target = self._spool_file()
        for extent in extents:
            _remove(target)
            self._run([self.config.globus_url_copy, *self.config.globus_url_copy_options,
                       "-partial-offset", str(extent.offset),
                       "-partial-length", str(extent.length),
                       source, file_url(target)])
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


class ReaderPool:
    """Idle ranged readers, reused across lanes and files; stale ones are closed.

    Readers are kept by server where one connection serves several files (GridFTP: the files
    an OST failure hit mostly come from the same server, and a connection costs the server a
    fork and a login), else by URI.
    """

    def __init__(self, opener: Callable[[str, Owner | None], RangedReader],
                 max_idle: float = 20.0):
        self.opener = opener
        self.max_idle = max_idle
        self.lock = threading.Lock()
        self.idle: dict[str, list[tuple[RangedReader, float]]] = {}

    def take(self, uri: str, owner: Owner | None = None) -> RangedReader:
        new = self.opener(uri, owner)  # connects on its first request only
        now = time.monotonic()
        stale = []
        reader = None
        with self.lock:
            waiting = self.idle.get(new.pool_key, [])
            while waiting:
                candidate, since = waiting.pop()
                if now - since <= self.max_idle:
                    reader = candidate
                    break
                stale.append(candidate)
        for old in stale:
            old.close()
        if reader is None:
            return new
        new.close()
        if reader.location.text != new.location.text:
            reader.retarget(new.location)
        return reader

    def give(self, reader: RangedReader) -> None:
        with self.lock:
            self.idle.setdefault(reader.pool_key, []).append((reader, time.monotonic()))

    def close_all(self) -> None:
        with self.lock:
            readers = [r for waiting in self.idle.values() for r, _ in waiting]
            self.idle.clear()
        for reader in readers:
            reader.close()


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
