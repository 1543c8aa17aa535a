"""The Darshan reader on real logs (tests/data/darshan, from darshan-hpc/darshan-logs); the
expected figures are the logs' own counters, read with darshan-parser's field names."""

from __future__ import annotations

from pathlib import Path

import pytest

from scratchkeeper.advisor import RANDOM, READ, SEQUENTIAL, WRITE, ModelParams, advise
from scratchkeeper.errors import InputError

LOGS = Path(__file__).parent.parent / "data" / "darshan"
SNYDER = LOGS / "snyder_ior-POSIX_id1057716-202103_11-8-64415-6936117869459351096_1.darshan"
TREDDY = LOGS / "treddy_mpi-io-test_id4373053_6-2-60198-9815401321915095332_1.darshan"
SHANE = LOGS / "shane_ior-HDF5_id438090-438090_11-9-41522-17417065676046418211_1.darshan"
MPI_IO_TEST = LOGS / "mpi-io-test-x86_64-3.4.0.darshan"
NONMPI = LOGS / "nonmpi_dxt_anonymized.darshan"
IMBALANCED = LOGS / "imbalanced-io.darshan"


@pytest.fixture(scope="module")
def read_workload():
    pytest.importorskip("darshan")
    from scratchkeeper.advisor.darshan import read_workload

    return read_workload


def classes(workload):
    return {(a.request_size, a.operation, a.pattern): pytest.approx(a.count)
            for a in workload.accesses}


def test_ior_posix_one_shared_file(read_workload):
    # one shared record (rank -1): 64 reads and 64 writes of 256 KiB, 63 of each sequential
    log = read_workload(str(SNYDER))
    assert (log.nprocs, log.io_processes, log.processes_per_node) == (16, 16, None)
    assert log.shared_file and (log.files, log.shared_files) == (1, 1)
    assert (log.bytes_read, log.bytes_written) == (16 << 20, 16 << 20)
    assert classes(log) == {(262144, READ, SEQUENTIAL): 63, (262144, READ, RANDOM): 1,
                            (262144, WRITE, SEQUENTIAL): 63, (262144, WRITE, RANDOM): 1}
    assert log.recorded_stripe == (1, 1 << 20)  # the LUSTRE module: -c 1 -S 1M
    assert log.workload is None  # no DXT, so no hosts: the caller gives the per-node count
    assert log.with_per_node(4).processes_per_node == 4


def test_mpi_io_test_16_mib_accesses(read_workload):
    log = read_workload(str(MPI_IO_TEST))
    assert (log.nprocs, log.io_processes, log.shared_file) == (4, 4, True)
    assert classes(log) == {(16 << 20, READ, SEQUENTIAL): 3, (16 << 20, READ, RANDOM): 1,
                            (16 << 20, WRITE, SEQUENTIAL): 3, (16 << 20, WRITE, RANDOM): 1}


def test_per_rank_records_of_one_file_make_it_shared_and_dxt_gives_the_hosts(read_workload):
    # test.out appears in the records of all 32 ranks (no reduced record); each rank also
    # wrote 2 x 40 bytes to a file of its own; all ranks ran on one host (DXT)
    log = read_workload(str(TREDDY))
    assert (log.nprocs, log.io_processes, log.processes_per_node) == (32, 32, 32)
    assert (log.files, log.shared_files) == (33, 1) and log.shared_file
    assert classes(log)[(40, WRITE, RANDOM)] == 64
    assert log.workload.processes_per_node == 32 and log.workload.processes == 32
    assert log.workload.common_request_size == 16 << 20


def test_a_non_mpi_run_of_files_of_its_own(read_workload):
    log = read_workload(str(NONMPI))
    assert (log.nprocs, log.io_processes, log.processes_per_node) == (1, 1, 1)
    assert not log.shared_file and (log.files, log.shared_files) == (75, 0)
    reads = sum(a.count for a in log.accesses if a.operation == READ)
    writes = sum(a.count for a in log.accesses if a.operation == WRITE)
    assert (reads, writes) == (pytest.approx(7822), pytest.approx(9830))  # POSIX_READS/WRITES
    assert log.workload.common_request_size == 1024  # POSIX_ACCESS1_ACCESS, 7692 times


def test_imbalanced_io_at_scale(read_workload):
    log = read_workload(str(IMBALANCED))
    assert (log.nprocs, log.io_processes, log.shared_file) == (496, 496, True)
    assert log.recorded_stripe == (1, 1 << 20)
    reads = sum(a.count for a in log.accesses if a.operation == READ)
    writes = sum(a.count for a in log.accesses if a.operation == WRITE)
    assert (reads, writes) == (pytest.approx(67861), pytest.approx(50832))
    sequential_reads = sum(a.count for a in log.accesses
                           if a.operation == READ and a.pattern == SEQUENTIAL)
    assert sequential_reads == pytest.approx(67341)  # POSIX_SEQ_READS summed
    assert log.with_per_node(16).common_request_size == 1 << 20
    advice = advise(log.with_per_node(16), ModelParams(), 8)
    assert advice.layout == "1-DV"  # p = 496 >> n = 8: implication 3


def test_reads_only(read_workload):
    log = read_workload(str(SHANE), operations=(READ,))
    assert {a.operation for a in log.accesses} == {READ}
    # POSIX_SIZE_READ_100_1K = 17 (represented by POSIX_ACCESS2_ACCESS = 512) against
    # POSIX_SIZE_READ_100K_1M = 16 (256 KiB): the HDF5 metadata reads are the more common
    sizes = {a.request_size for a in log.accesses}
    assert sizes == {10, 512, 262144}
    assert log.with_per_node(1).common_request_size == 512


def test_a_per_node_count_above_the_processes_is_refused(read_workload):
    with pytest.raises(InputError, match=r"--per-node 64: the log has 32 I/O processes"):
        read_workload(str(TREDDY), per_node=64)


@pytest.mark.parametrize("content, message", [
    (b"", "not a readable Darshan log (invalid log file (failed to read version))"),
    (b"\x00" * 4096, "not a readable Darshan log ("),
    ("half", "not a readable Darshan log ("),
])
def test_what_is_not_a_darshan_log_is_one_line_naming_the_file(read_workload, tmp_path,
                                                               content, message, capfd):
    path = tmp_path / "bad.darshan"
    path.write_bytes(SNYDER.read_bytes()[:1500] if content == "half" else content)
    with pytest.raises(InputError) as info:
        read_workload(str(path))
    assert str(info.value).startswith(f"{path}: {message}") and "\n" not in str(info.value)
    assert capfd.readouterr().err == ""  # the C library's own complaints are not let through


def test_missing_and_not_regular(read_workload, tmp_path):
    with pytest.raises(InputError, match="no such Darshan log"):
        read_workload(str(tmp_path / "absent.darshan"))
    with pytest.raises(InputError, match="not a regular file"):
        read_workload(str(tmp_path))


def test_without_pydarshan_the_error_says_what_to_install(monkeypatch):
    import importlib.util

    from scratchkeeper.advisor.darshan import read_workload

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *rest: None if name == "darshan" else find_spec(name, *rest))
    with pytest.raises(InputError, match=r"needs PyDarshan: pip install darshan"):
        read_workload(str(SNYDER))
