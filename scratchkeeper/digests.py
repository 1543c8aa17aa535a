"""Block digests recorded at stage-in: the CRC-32C of every fixed-size block of a staged file.

``stage commit`` reads each staged file once and records its SHA-256 (the whole-file check, also
an extended attribute) and, here in the state store, the CRC-32C (Castagnoli) of every ``block_size`` bytes.
A patch (recovery, the thesis's §4.6.3) then checks each block it fetched against the digest of the
bytes that were *staged*: that catches corruption in transit and a source that changed since
stage-in, block by block, on the client, with no server-side hashing and no read-back of the
rest of the file. CRC-32C is meant for accidental change, which is what it guards against here
(it is also what Lustre checksums its bulk RPCs with); the whole-file SHA-256 stays for the cases
without digests. The ``crc32c`` package computes it with the CPU's CRC32 instruction at several
GB/s and releases the GIL, so checking costs a patch little (docs/dependencies.rst).

A record is keyed by path and only used when the file's recorded SHA-256 and size still match,
so a digest of an earlier file at the same path is never applied to a new one.
"""

from __future__ import annotations

import hashlib
import time
import weakref
from array import array
from dataclasses import dataclass

from crc32c import crc32c

from .state import StateStore
from .storage.layout import Extent

ALGORITHM = "crc32c"
READ_CHUNK = 4 << 20

COMPONENT = "digests"
MIGRATIONS = [
    """
    CREATE TABLE block_digests (
        path        TEXT PRIMARY KEY,
        size        INTEGER NOT NULL,
        sha256      TEXT NOT NULL,
        block_size  INTEGER NOT NULL,
        algorithm   TEXT NOT NULL,
        digests     BLOB NOT NULL,
        recorded    REAL NOT NULL
    );
    """,
]


@dataclass(frozen=True)
class BlockDigests:
    """CRC-32C of blocks ``[i * block_size, (i + 1) * block_size)`` of a ``size``-byte file."""

    size: int
    block_size: int
    crcs: array[int]  # of unsigned 32-bit ints, one per block

    def __post_init__(self) -> None:
        if self.block_size <= 0:
            raise ValueError(f"block size {self.block_size}: must be positive")
        expected = -(-self.size // self.block_size)
        if len(self.crcs) != expected:
            raise ValueError(f"{len(self.crcs)} digests for {expected} blocks")

    def block(self, index: int) -> Extent:
        start = index * self.block_size
        return Extent(start, min(self.block_size, self.size - start))

    def blocks_over(self, extent: Extent) -> range:
        """Indexes of the blocks that ``extent`` touches."""
        if extent.length <= 0:
            return range(0)
        return range(extent.offset // self.block_size, (extent.end - 1) // self.block_size + 1)

    def check(self, offset: int, data: bytes | bytearray | memoryview) -> tuple[list[int], list[int]]:
        """Check every block wholly inside ``data`` (the bytes at ``offset``).

        Returns ``(bad, partial)``: blocks whose CRC-32C differs, and blocks ``data`` covers only
        in part (the caller checks those once their other bytes are in place).
        """
        view = memoryview(data)
        extent = Extent(offset, len(view))
        bad, partial = [], []
        for index in self.blocks_over(extent):
            block = self.block(index)
            if block.offset < extent.offset or block.end > extent.end:
                partial.append(index)
                continue
            start = block.offset - offset
            if crc32c(view[start:start + block.length]) != self.crcs[index]:
                bad.append(index)
        return bad, partial

    def to_bytes(self) -> bytes:
        packed = array("I", self.crcs)
        if packed.itemsize != 4:  # pragma: no cover - every platform we run on has 4-byte I
            raise RuntimeError("array('I') is not 32 bits here")
        return packed.tobytes()

    @classmethod
    def from_bytes(cls, size: int, block_size: int, blob: bytes) -> BlockDigests:
        crcs = array("I")
        crcs.frombytes(blob)
        return cls(size, block_size, crcs)


def digest_file(path: str | int, block_size: int) -> tuple[str, BlockDigests | None]:
    """One read of ``path`` (or of an open descriptor, left open): its SHA-256 (hex) and the
    CRC-32C of each ``block_size`` block (None for a block size of 0: the SHA-256 only)."""
    if block_size < 0:
        raise ValueError(f"block size {block_size}: must not be negative")
    sha = hashlib.sha256()
    crcs = array("I")
    size = 0
    crc = 0
    filled = 0  # bytes of the current block seen so far
    with open(path, "rb", closefd=not isinstance(path, int)) as handle:
        while chunk := handle.read(READ_CHUNK):
            sha.update(chunk)
            size += len(chunk)
            view = memoryview(chunk) if block_size else memoryview(b"")
            while view:
                take = min(block_size - filled, len(view))
                crc = crc32c(view[:take], crc)
                filled += take
                view = view[take:]
                if filled == block_size:
                    crcs.append(crc)
                    crc, filled = 0, 0
    if filled:
        crcs.append(crc)
    return sha.hexdigest(), BlockDigests(size, block_size, crcs) if block_size else None


def digest_bytes(data: bytes, block_size: int) -> BlockDigests:
    """The block digests of bytes in memory (tests, benchmarks)."""
    view = memoryview(data)
    crcs = array("I", (crc32c(view[o:o + block_size])
                       for o in range(0, len(view), block_size)))
    return BlockDigests(len(view), block_size, crcs)


_ensured: weakref.WeakSet[StateStore] = weakref.WeakSet()


def ensure(store: StateStore) -> None:
    """The table exists (checked once per store: a lookup must not take the write lock)."""
    if store not in _ensured:
        store.ensure_schema(COMPONENT, MIGRATIONS)
        _ensured.add(store)


def record(store: StateStore, path: str, sha256: str, digests: BlockDigests) -> None:
    """Record (or replace) the block digests of the file now at ``path``."""
    ensure(store)
    with store.transaction() as conn:
        conn.execute("INSERT INTO block_digests(path, size, sha256, block_size, algorithm, digests,"
                     " recorded) VALUES (?,?,?,?,?,?,?) ON CONFLICT(path) DO UPDATE SET "
                     "size=excluded.size, sha256=excluded.sha256, block_size=excluded.block_size,"
                     " algorithm=excluded.algorithm, digests=excluded.digests,"
                     " recorded=excluded.recorded",
                     (path, digests.size, sha256.removeprefix("sha256:"), digests.block_size,
                      ALGORITHM, digests.to_bytes(), time.time()))


def lookup(store: StateStore, path: str, sha256: str | None, size: int) -> BlockDigests | None:
    """The digests recorded for ``path`` if they describe the file with this SHA-256 and size."""
    if not sha256:
        return None
    ensure(store)
    rows = store.query("SELECT size, sha256, block_size, algorithm, digests FROM block_digests "
                       "WHERE path = ?", (path,))
    if not rows:
        return None
    row = rows[0]
    if (row["algorithm"] != ALGORITHM or row["size"] != size
            or row["sha256"] != sha256.removeprefix("sha256:")):
        return None
    try:
        return BlockDigests.from_bytes(row["size"], row["block_size"], bytes(row["digests"]))
    except ValueError:
        return None  # a damaged record: verify the slow way


def forget(store: StateStore, path: str) -> None:
    ensure(store)
    with store.transaction() as conn:
        conn.execute("DELETE FROM block_digests WHERE path = ?", (path,))
