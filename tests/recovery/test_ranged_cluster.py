"""Ranged transfers against the cluster's GridFTP and nginx servers (scratchkeeper.transfer.ranged)."""

from __future__ import annotations

import hashlib
import mmap

import pytest

from scratchkeeper.config import TransferConfig
from scratchkeeper.errors import TransferError
from scratchkeeper.storage.layout import Extent
from scratchkeeper.transfer import gridftp
from scratchkeeper.transfer.buffers import BufferPool
from scratchkeeper.transfer.gridftp import EretRangedReader
from scratchkeeper.transfer.ranged import (
    CurlRangedReader,
    GlobusRangedReader,
    PosixRangedReader,
    open_ranged,
)

RANGES = [Extent(0, 1), Extent(17, 65_536), Extent(1_000_003, 2_500_000), Extent(3_999_990, 10)]


def _uri(sources, kind, path):
    return {"eret": sources.ftp, "eret-per-range": sources.ftp, "globus-url-copy": sources.ftp,
            "curl": sources.http, "pread": sources.file}[kind](path)


@pytest.mark.parametrize("kind,cls", [("eret", EretRangedReader),
                                      ("eret-per-range", EretRangedReader),
                                      ("globus-url-copy", GlobusRangedReader),
                                      ("curl", CurlRangedReader), ("pread", PosixRangedReader)])
def test_each_client_returns_exactly_the_ranges(sources, tmp_path, kind, cls):
    path, data = sources.make("ranges.bin", 4_000_000)
    with open_ranged(_uri(sources, kind, path), TransferConfig(), ftp_method=kind,
                     spool_dir=str(tmp_path)) as reader:
        assert isinstance(reader, cls)
        pieces = list(reader.fetch(RANGES))
        size = reader.size()
    assert [p.extent for p in pieces] == RANGES
    assert all(p.data == data[p.extent.offset:p.extent.end] for p in pieces)
    assert all(p.verified for p in pieces) == kind.startswith("eret")
    assert size == (None if kind == "globus-url-copy" else len(data))
    assert list(tmp_path.iterdir()) == []  # the spool is gone


def test_mode_e_brings_many_ranges_in_one_transfer(sources, monkeypatch):
    path, data = sources.make("many.bin", 3_000_001)
    # unsorted, two touching ranges (a server block may straddle them), the file's last byte
    wanted = [Extent(2_999_000, 1001), Extent(5, 70_000), Extent(70_005, 300_000),
              Extent(1_048_576, 262_144), Extent(1_310_720, 1)]
    transfers, receivers = [], []
    real_retr = gridftp._ModeEReceiver.__init__

    def counting(self, uri, extents, **options):
        transfers.append(len(extents))
        receivers.append(self)
        real_retr(self, uri, extents, **options)

    monkeypatch.setattr(gridftp._ModeEReceiver, "__init__", counting)
    with open_ranged(sources.ftp(path), TransferConfig()) as reader:
        pieces = list(reader.fetch(wanted, server_checksums=False))
        again = list(reader.fetch(wanted[:2]))  # same control connection, now with CKSM
    assert transfers == [5, 2]
    assert sorted(p.extent for p in pieces) == sorted(wanted)
    assert all(p.data == data[p.extent.offset:p.extent.end] for p in pieces + again)
    assert not any(p.verified for p in pieces) and all(p.verified for p in again)
    # bytes handed on are not kept (a GiB may pass); kept only for the CKSM after the transfer
    assert receivers[0].completed == [] and len(receivers[1].completed) == 2


def test_mode_e_receives_into_pool_buffers_and_reuses_them(sources):
    """A patch hands each buffer back once written: the next ranges land in the same memory."""
    path, data = sources.make("pooled.bin", 3_000_000)
    wanted = [Extent(offset, 131_072) for offset in range(0, 2_900_000, 500_000)]
    pool = BufferPool(keep_bytes=8 << 20)
    with open_ranged(sources.ftp(path), TransferConfig()) as reader:
        first = list(reader.fetch(wanted, server_checksums=False, buffers=pool))
        assert all(isinstance(p.data, mmap.mmap) for p in first)
        assert all(p.data[:] == data[p.extent.offset:p.extent.end] for p in first)
        used = {id(p.data) for p in first}
        for piece in first:
            pool.give(piece.data)
        shifted = [Extent(e.offset + 7, e.length) for e in wanted]
        second = list(reader.fetch(shifted, server_checksums=False, buffers=pool))
    assert {id(p.data) for p in second} == used  # the same buffers, refilled
    assert all(p.data[:] == data[p.extent.offset:p.extent.end] for p in second)


def test_mode_e_hundreds_of_ranges(sources):
    path, data = sources.make("sparse.bin", 2_000_000)
    wanted = [Extent(offset, 1000) for offset in range(0, 2_000_000, 5000)]  # 400 ranges
    with open_ranged(sources.ftp(path), TransferConfig()) as reader:
        pieces = list(reader.fetch(wanted, server_checksums=False))
    assert len(pieces) == 400
    assert all(p.data == data[p.extent.offset:p.extent.end] for p in pieces)


def test_mode_e_reader_recovers_from_an_abandoned_transfer(sources):
    path, data = sources.make("abandon.bin", 4_000_000)
    wanted = [Extent(offset, 100_000) for offset in range(0, 4_000_000, 400_000)]
    with open_ranged(sources.ftp(path), TransferConfig()) as reader:
        stream = reader.fetch(wanted, server_checksums=False)
        first = next(stream)
        stream.close()  # the consumer gives up mid-transfer (a block failed its digest, say)
        rest = list(reader.fetch(wanted[1:], server_checksums=False))
    assert first.data == data[first.extent.offset:first.extent.end]
    assert len(rest) == len(wanted) - 1
    assert all(p.data == data[p.extent.offset:p.extent.end] for p in rest)


def test_overlapping_ranges_are_refused(sources):
    path, _ = sources.make("overlap.bin", 10_000)
    with open_ranged(sources.ftp(path), TransferConfig()) as reader:
        with pytest.raises(ValueError, match="overlapping"):
            list(reader.fetch([Extent(0, 100), Extent(50, 100)]))


def test_gridftp_whole_file_checksum(sources):
    path, data = sources.make("whole.bin", 300_007)
    with open_ranged(sources.ftp(path), TransferConfig()) as reader:
        assert reader.whole_checksum("SHA256") == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("kind", ["eret", "eret-per-range", "globus-url-copy", "curl", "pread"])
def test_range_past_the_end_is_permanent(sources, kind):
    path, _ = sources.make("short.bin", 1000)
    with open_ranged(_uri(sources, kind, path), TransferConfig(), ftp_method=kind) as reader:
        with pytest.raises(TransferError) as caught:
            list(reader.fetch([Extent(990, 100)]))
    assert caught.value.permanent


@pytest.mark.parametrize("kind", ["eret", "eret-per-range", "globus-url-copy", "curl", "pread"])
def test_missing_source_is_permanent_and_one_line(sources, kind):
    path = sources.folder / "never-there.bin"
    with open_ranged(_uri(sources, kind, path), TransferConfig(), ftp_method=kind) as reader:
        with pytest.raises(TransferError) as caught:
            list(reader.fetch([Extent(0, 10)]))
    assert caught.value.permanent
    assert "\n" not in str(caught.value)
