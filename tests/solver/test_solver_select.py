"""select_replicas: API contract, input checking and small worked examples."""

from __future__ import annotations

import math
from array import array

import pytest

from scratchkeeper.errors import SolverInputError
from scratchkeeper.solver import ALGORITHMS, BucketsCSR, DiskTable, select_replicas

ALL = [(name, threads) for name in ALGORITHMS for threads in ((1, 2) if name == "parallel" else (1,))]


@pytest.mark.parametrize("algorithm,threads", ALL)
def test_paper_table2_example(algorithm, threads):
    # the replica-selection paper's Table 2: disks 0-3 C=8.3 D=2 X=1; disk 4 C=13.2 D=1; disks 5-6 C=6.1 D=1
    cost = [8.3] * 4 + [13.2] + [6.1] * 2
    delay = [2, 2, 2, 2, 1, 1, 1]
    load = [1, 1, 1, 1, 0, 0, 0]
    buckets = [[0, 4, 5], [1, 5, 6], [2, 6, 0], [3, 0, 1], [4, 1, 2], [5, 2, 3]]
    selection = select_replicas(buckets, cost, delay, load, algorithm=algorithm, threads=threads)
    # six buckets: one each from four disks costs at most 11.3; disks 5-6 give 7.1 and 13.2
    assert selection.response_time == pytest.approx(11.3)
    assert all(disk in replicas for disk, replicas in zip(selection.assignment, buckets))
    assert sum(selection.counts) == 6


@pytest.mark.parametrize("algorithm,threads", ALL)
def test_hot_disk_forces_queue(algorithm, threads):
    selection = select_replicas([[0]] * 5 + [[0, 1]], [2.0, 100.0], [0, 0], [0, 0],
                                algorithm=algorithm, threads=threads)
    assert selection.response_time == 12.0
    assert list(selection.counts) == [6, 0]


def test_ties_are_exact_with_decimal_costs():
    # 3 x 0.1 and 0.3 are equal as decimals although not as doubles
    selection = select_replicas([[0], [0], [0], [1]], [0.1, 0.3], [0, 0], [0, 0])
    assert selection.response_time == 0.3
    assert DiskTable.from_lists([0.1, 0.3], [0, 0], [0, 0]).scale == 10


def test_empty_request():
    selection = select_replicas([], [1.0], [0.0], [0.0])
    assert selection.response_time == 0.0 and list(selection.counts) == [0]


def test_csr_input_matches_lists():
    buckets = [[0, 1], [1], [2, 0, 0], [1, 2]]
    csr = BucketsCSR.from_arrays([0, 2, 3, 6, 8], [0, 1, 1, 2, 0, 0, 1, 2])
    table = DiskTable.from_lists([1.0, 2.0, 1.5], [0.5, 0.0, 0.0], [0.0, 1.0, 0.0])
    assert table.select(csr).response_time == table.select(buckets).response_time


def test_csr_accepts_numpy_int32():
    numpy = pytest.importorskip("numpy")
    csr = BucketsCSR.from_arrays(numpy.array([0, 1, 3], dtype=numpy.int32),
                                 numpy.array([1, 0, 1], dtype=numpy.int32))
    assert select_replicas(csr, [1.0, 1.0], [0, 0], [0, 0]).response_time == 1.0


@pytest.mark.parametrize("buckets,cost,delay,load,message", [
    ([[0], []], [1.0], [0.0], [0.0], "bucket 1: has no replica"),
    ([[0], [0, 3]], [1.0, 1.0], [0.0, 0.0], [0.0, 0.0], "bucket 1: disk id 3 out of range"),
    ([[0], [-1]], [1.0], [0.0], [0.0], "bucket 1: disk id -1 out of range"),
    ([[0]], [0.0], [0.0], [0.0], "disk 0: cost must be > 0"),
    ([[0]], [1.0, -2.0], [0.0, 0.0], [0.0, 0.0], "disk 1: cost must be > 0"),
    ([[0]], [1.0], [-1.0], [0.0], "disk 0: delay must be >= 0"),
    ([[0]], [1.0], [0.0], [-0.5], "disk 0: load must be >= 0"),
    ([[0]], [math.nan], [0.0], [0.0], "disk 0: cost must be finite"),
    ([[0]], [1.0], [math.inf], [0.0], "disk 0: delay must be finite"),
    ([[0]], ["1"], [0.0], [0.0], "disk 0: cost must be a number"),
    ([[0], [1.5]], [1.0, 1.0], [0, 0], [0, 0], "bucket 1: disk ids must be integers"),
    ([[0], 1], [1.0, 1.0], [0, 0], [0, 0], "bucket 1: expected a list of disk ids"),
    ([[True]], [1.0, 1.0], [0, 0], [0, 0], "bucket 0: disk ids must be integers"),
    ([[0]], [1.0, 1.0], [0.0], [0.0], "one value per disk"),
])
def test_malformed_input_names_bucket_or_disk(buckets, cost, delay, load, message):
    with pytest.raises(SolverInputError, match=message.replace("(", r"\(")) as caught:
        select_replicas(buckets, cost, delay, load)
    assert caught.value.exit_code == 2


def test_bad_csr_offsets():
    csr = BucketsCSR(array("i", [0, 2, 1]), array("i", [0, 0]))
    with pytest.raises(SolverInputError, match="bucket 1: offset"):
        select_replicas(csr, [1.0], [0.0], [0.0])
    with pytest.raises(SolverInputError, match="offsets point past"):
        select_replicas(BucketsCSR(array("i", [0, 5]), array("i", [0])), [1.0], [0.0], [0.0])


@pytest.mark.parametrize("algorithm,threads,message", [
    ("fastest", 1, "unknown algorithm"), ("parallel", 0, "threads"), ("auto", 2.0, "threads")])
def test_bad_algorithm_or_threads(algorithm, threads, message):
    with pytest.raises(SolverInputError, match=message):
        select_replicas([[0]], [1.0], [0.0], [0.0], algorithm=algorithm, threads=threads)


def test_auto_reports_the_algorithm_used():
    assert select_replicas([[0]], [1.0], [0.0], [0.0]).algorithm == "slotsearch"


def test_large_times_fall_back_to_doubles():
    # 1e12 units x 1e6 buckets overflows exact integers: canonical doubles are used instead
    table = DiskTable.from_lists([1e12], [0.0], [0.0])
    selection = table.select([[0]] * 3)
    assert selection.response_time == 3e12


@pytest.mark.parametrize("cost, delay, load, message", [
    ([10 ** 400], [0], [0], "disk 0: cost 1000000000000000000000000000000000000000000000000000"
     "00000000... (401 characters) is too large (at most 1.79769e+308)"),
    ([1], [10 ** 309], [0], "disk 0: delay 1000"),
    ([1], [1e308], [1e308], "disk 0: delay + load (1e+308 + 1e+308) is too large to represent"),
])
def test_values_beyond_a_double_are_input_errors(cost, delay, load, message):
    with pytest.raises(SolverInputError) as info:
        select_replicas([[0]], cost, delay, load)
    assert str(info.value).startswith(message) and info.value.exit_code == 2


@pytest.mark.parametrize("algorithm,threads", ALL)
def test_slot_times_overflowing_name_the_disk(algorithm, threads):
    # every value is a valid double, 3 * 1e308 is not: the native core reports the disk
    with pytest.raises(SolverInputError, match=r"^disk 1: delay \+ load \+ 3 bucket\(s\) x cost "
                       "overflows a double"):
        select_replicas([[0], [1], [1], [1]], [1.0, 1e308], [0, 0], [0, 0],
                        algorithm=algorithm, threads=threads)


def test_a_bucket_of_many_bad_ids_is_named_in_one_short_line():
    with pytest.raises(SolverInputError) as info:
        select_replicas([[2 ** 40] * 100_000], [1.0], [0], [0])
    assert len(str(info.value)) < 200 and str(info.value).startswith("bucket 0: disk id out of")
