"""Read requests from Darshan DXT traces, cut into data-block requests.

A DXT record holds, per file and rank, every read (offset, length, start, end). A read becomes
one request per data block it touches (``offset // block_size`` .. ``(offset+length-1) //
block_size``), all arriving at the read's start time; a data block is numbered densely in the
order blocks are first read, so block ids are small integers (the paper's data block numbers).

PyDarshan (``pip install darshan``, the ``qos`` extra) is imported only here, when a trace is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from scratchkeeper.errors import QosError, TraceError


@dataclass(frozen=True)
class TraceRead:
    """One read of a DXT trace (times in seconds from the job's start)."""

    file_id: int
    rank: int
    offset: int
    length: int
    start: float
    end: float


@dataclass(frozen=True)
class BlockRequest:
    """A request for one data block (stripe object) at ``arrival`` seconds."""

    arrival: float
    data_block: int
    file_id: int
    block_index: int


def read_dxt_reads(path: str | Path, module: str = "DXT_POSIX") -> list[TraceRead]:
    """Every read of ``module`` (DXT_POSIX or DXT_MPIIO) in a Darshan log, by start time."""
    try:
        import darshan
    except ImportError as err:
        raise QosError("reading a Darshan trace needs PyDarshan: pip install darshan "
                       "(or the scratchkeeper[qos] extra)") from err
    path = Path(path)
    if not path.is_file():
        raise TraceError("no such Darshan log", path=str(path))
    try:
        report = darshan.DarshanReport(str(path), read_all=True)
    except Exception as err:  # PyDarshan raises bare RuntimeError/ValueError on a bad log
        raise TraceError(f"not a readable Darshan log: {err}", path=str(path)) from err
    if module not in report.records:
        raise TraceError(f"no {module} records (modules: {', '.join(sorted(report.records))})",
                         path=str(path))
    reads = []
    for record in report.records[module].to_df():
        segments = record["read_segments"]
        if len(segments) == 0:
            continue
        for offset, length, start, end in zip(segments["offset"], segments["length"],
                                              segments["start_time"], segments["end_time"]):
            reads.append(TraceRead(int(record["id"]), int(record["rank"]), int(offset),
                                   int(length), float(start), float(end)))
    reads.sort(key=lambda r: (r.start, r.file_id, r.offset))
    return reads


def block_requests(reads: list[TraceRead], block_size: int) -> list[BlockRequest]:
    """Cut reads into data-block requests; zero-length reads request nothing."""
    if block_size < 1:
        raise QosError(f"block size must be >= 1 byte, got {block_size}")
    numbers: dict[tuple[int, int], int] = {}
    requests = []
    for read in reads:
        if read.length <= 0:
            continue
        for index in range(read.offset // block_size, (read.offset + read.length - 1) // block_size + 1):
            key = (read.file_id, index)
            block = numbers.setdefault(key, len(numbers))
            requests.append(BlockRequest(read.start, block, read.file_id, index))
    return requests
