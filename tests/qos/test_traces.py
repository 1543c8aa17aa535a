"""DXT traces: a real captured log (darshan-logs' mpi-io-test, 32 ranks) and hand cases."""

from pathlib import Path

import pytest

from scratchkeeper.errors import QosError, TraceError
from scratchkeeper.qos.traces import TraceRead, block_requests, read_dxt_reads

LOG = Path(__file__).resolve().parents[1] / "data" / "qos" / "treddy_mpi-io-test.darshan"


def test_block_requests_hand_cut():
    reads = [TraceRead(7, 0, 100, 2000, 0.5, 0.6), TraceRead(7, 0, 1024, 1, 0.7, 0.8),
             TraceRead(8, 1, 0, 0, 0.9, 0.9), TraceRead(8, 1, 5000, 10, 1.0, 1.1)]
    requests = block_requests(reads, 1024)
    assert [(r.arrival, r.data_block, r.file_id, r.block_index) for r in requests] == [
        (0.5, 0, 7, 0), (0.5, 1, 7, 1), (0.5, 2, 7, 2), (0.7, 1, 7, 1), (1.0, 3, 8, 4)]
    with pytest.raises(QosError, match="block size must be >= 1"):
        block_requests(reads, 0)


def test_read_the_captured_dxt_log():
    pytest.importorskip("darshan")
    reads = read_dxt_reads(LOG)
    assert len(reads) == 128
    assert {r.length for r in reads} == {16 * 1024 * 1024}
    assert len({r.rank for r in reads}) == 32
    assert reads == sorted(reads, key=lambda r: (r.start, r.file_id, r.offset))
    assert len(block_requests(reads, 1 << 20)) == 2048
    assert len(read_dxt_reads(LOG, "DXT_MPIIO")) == 128


def test_bad_logs_are_named(tmp_path):
    pytest.importorskip("darshan")
    with pytest.raises(TraceError, match=r"treddy_mpi-io-test.darshan: no DXT_LUSTRE records"):
        read_dxt_reads(LOG, "DXT_LUSTRE")
    with pytest.raises(TraceError, match="no such Darshan log"):
        read_dxt_reads(tmp_path / "missing.darshan")
    text = tmp_path / "notalog.darshan"
    text.write_text("hello\n")
    with pytest.raises(TraceError, match="notalog.darshan: not a readable Darshan log"):
        read_dxt_reads(text)
