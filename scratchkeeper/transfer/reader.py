"""What every ranged reader is: the :class:`RangedReader` contract, the :class:`RangeData` it
yields and the :class:`RangeFailed` it raises naming the byte.

The readers themselves (:mod:`.ranged` for ``file://``, ``http(s)://`` and globus-url-copy,
:mod:`.gridftp` for GridFTP partial retrieval) build on it; :func:`.ranged.open_ranged` picks
one per source URI.
"""

from __future__ import annotations

import abc
import mmap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ..errors import TransferError
from ..storage.layout import Extent
from .buffers import BufferPool
from .uri import Location


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

    def connect(self) -> None:  # noqa: B027 (a hook: most readers need nothing here)
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

    def close(self) -> None:  # noqa: B027 (a hook: most readers hold nothing)
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
