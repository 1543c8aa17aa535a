"""The scratch mount's read records (``store_root/reads.log``, docs/mount.rst "Read
records")::

    READS <time> <inode> <uid> <reads> <bytes> <scratch path, %XX-encoded>

Each counts the reads of one file since its previous record (the inode is the MDT inode's
number, the file's identity across renames).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..storage.mount_logs import READ_LOG, decode_path

__all__ = ["READ_LOG", "ReadRecord", "parse_reads"]


@dataclass(frozen=True)
class ReadRecord:
    time: float
    object_id: int
    uid: int
    reads: int
    bytes: int
    path: str


def parse_reads(line: bytes) -> ReadRecord:
    """One line of ``reads.log``; ValueError for anything else."""
    fields = line.rstrip(b"\n").split(b" ")
    if len(fields) != 7 or fields[0] != b"READS":
        raise ValueError(f"not a READS record: {line[:120]!r}")
    numbers = [int(f) for f in fields[2:6]]
    if any(n < 0 for n in numbers) or numbers[2] == 0:
        raise ValueError(f"bad counts in {line[:120]!r}")
    return ReadRecord(float(fields[1]), numbers[0], numbers[1], numbers[2], numbers[3],
                      decode_path(fields[6]))
