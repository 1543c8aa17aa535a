"""The list path (converted in C), the numpy path and the prepared path (DiskTable + BucketsCSR)
give the same answers and word every bad input the same way."""

from __future__ import annotations

import math
import random
from array import array

import pytest
from solver_reference import flow_reference, random_instance, response_time

import scratchkeeper.solver as solver
from scratchkeeper.errors import SolverInputError
from scratchkeeper.solver import BucketsCSR, DiskTable, select_replicas

numpy = pytest.importorskip("numpy")


def _prepared(buckets, cost, delay, load, **options):
    return DiskTable.from_lists(cost, delay, load).select(BucketsCSR.from_lists(buckets),
                                                          **options)


def _numpy_buckets(buckets):
    """A (buckets, width) int32 matrix when every bucket has the same width, else a list of
    int32 vectors."""
    if buckets and len({len(replicas) for replicas in buckets}) == 1:
        return numpy.array(buckets, dtype=numpy.int32)
    return [numpy.array(replicas, dtype=numpy.int32) for replicas in buckets]


def _numpy(buckets, cost, delay, load, **options):
    return select_replicas(_numpy_buckets(buckets), numpy.array(cost, dtype=numpy.float64),
                           numpy.array(delay, dtype=numpy.float64),
                           numpy.array(load, dtype=numpy.float64), **options)


def _same(first, second):
    assert first.response_time == second.response_time
    assert list(first.assignment) == list(second.assignment)
    assert list(first.counts) == list(second.counts)
    assert (first.algorithm, first.probes) == (second.algorithm, second.probes)


@pytest.mark.parametrize("kind", ["homogeneous", "heterogeneous", "floats"])
@pytest.mark.parametrize("algorithm,threads", [("auto", 1), ("integrated", 1), ("parallel", 2)])
def test_list_numpy_and_prepared_paths_agree(kind, algorithm, threads):
    rng = random.Random(f"paths-{kind}-{algorithm}")
    for round_number in range(40):
        width = rng.choice([None, 1, 3])  # None: mixed widths and duplicates
        instance = random_instance(rng, disks=rng.randint(1, 30), buckets=rng.randint(0, 120),
                                   kind=kind, max_replicas=3)
        buckets, cost, delay, load = instance
        if width:
            buckets = [(replicas * width)[:width] for replicas in buckets]
        options = {"algorithm": algorithm, "threads": threads}
        by_lists = select_replicas(buckets, cost, delay, load, **options)
        _same(by_lists, _prepared(buckets, cost, delay, load, **options))
        _same(by_lists, _numpy(buckets, cost, delay, load, **options))
        _same(by_lists, select_replicas([tuple(r) for r in buckets], tuple(cost), tuple(delay),
                                        tuple(load), **options))
        if round_number % 8 == 0:
            optimum = flow_reference(buckets, cost, delay, load)
            assert response_time(by_lists.assignment, cost, delay, load) == optimum


def test_a_request_of_paper_size_agrees_on_every_path():
    rng = random.Random("paths-big")
    buckets, cost, delay, load = random_instance(rng, disks=100, buckets=5000,
                                                 kind="heterogeneous")
    buckets = [[replicas[0], (replicas[0] + 7) % 100, (replicas[0] + 31) % 100]
               for replicas in buckets]
    by_lists = select_replicas(buckets, cost, delay, load)
    _same(by_lists, _prepared(buckets, cost, delay, load))
    _same(by_lists, _numpy(buckets, cost, delay, load))


def test_lists_are_converted_in_one_native_call(monkeypatch):
    # the documented list API must not go through the prepared path's per-request objects
    def refuse(*args, **kwargs):
        raise AssertionError("select_replicas with lists built a DiskTable or BucketsCSR")

    monkeypatch.setattr(solver.BucketsCSR, "from_lists", classmethod(refuse))
    monkeypatch.setattr(solver.DiskTable, "from_lists", classmethod(refuse))
    selection = select_replicas([[0, 1], [1]], [1.0, 2.0], [0.0, 0.5], [0.0, 0.0])
    assert selection.response_time == 2.5 and list(selection.counts) == [1, 1]


def test_int32_buffers_are_used_without_a_copy():
    offsets = numpy.array([0, 1, 3], dtype=numpy.int32)
    disks = numpy.array([1, 0, 1], dtype=numpy.int32)
    csr = BucketsCSR.from_arrays(offsets, disks)
    assert csr.offsets.obj is offsets and csr.disks.obj is disks
    assert select_replicas(csr, [1.0, 1.0], [0, 0], [0, 0]).response_time == 1.0
    assert BucketsCSR.from_arrays(array("i", [0, 1]), array("i", [0])).bucket_count == 1


def test_a_strided_or_wide_matrix_is_read_as_a_sequence():
    matrix = numpy.array([[0, 9, 1], [1, 9, 0]], dtype=numpy.int64)
    by_columns = numpy.ascontiguousarray(matrix[:, ::2], dtype=numpy.int32)
    strided = numpy.array(matrix, dtype=numpy.int32)[:, ::2]
    cost, delay, load = [1.0, 3.0], [0.0, 0.0], [0.0, 0.0]
    expected = select_replicas([[0, 1], [1, 0]], cost, delay, load)
    for buckets in (matrix[:, ::2], by_columns, strided):
        _same(select_replicas(buckets, cost, delay, load), expected)


class _FailingIndex:
    """A disk id whose __index__ fails: its error passes through unless a bool is named."""

    def __index__(self):
        raise ValueError("index failed")

    def __repr__(self):
        return "_FailingIndex()"


_BAD_INPUTS = [
    ([[0], []], [1.0], [0.0], [0.0], "bucket 1: has no replica"),
    ([[0], [0, 3]], [1.0, 1.0], [0.0, 0.0], [0.0, 0.0],
     "bucket 1: disk id 3 out of range (there are 2 disks, ids 0..1)"),
    ([[0], [-1]], [1.0], [0.0], [0.0], "bucket 1: disk id -1 out of range"),
    ([[0]], [0.0], [0.0], [0.0], "disk 0: cost must be > 0, got 0.0"),
    ([[0]], [1.0, -2.0], [0.0, 0.0], [0.0, 0.0], "disk 1: cost must be > 0, got -2.0"),
    ([[0]], [1.0], [-1.0], [0.0], "disk 0: delay must be >= 0, got -1.0"),
    ([[0]], [1.0], [0.0], [-0.5], "disk 0: load must be >= 0, got -0.5"),
    ([[0]], [math.nan], [0.0], [0.0], "disk 0: cost must be finite, got nan"),
    ([[0]], [1.0], [math.inf], [0.0], "disk 0: delay must be finite, got inf"),
    ([[0]], [1.0], [0.0], [-math.inf], "disk 0: load must be finite, got -inf"),
    ([[0]], [-1.0, math.nan], [0.0, 0.0], [0.0, 0.0], "disk 0: cost must be > 0"),
    ([[0]], ["1"], [0.0], [0.0], "disk 0: cost must be a number, got '1'"),
    ([[0]], [1.0, None], [0.0, 0.0], [0.0, 0.0], "disk 1: cost must be a number, got None"),
    ([[0]], [True], [0.0], [0.0], "disk 0: cost must be a number, got True"),
    ([[0], [1.5]], [1.0, 1.0], [0, 0], [0, 0], "bucket 1: disk ids must be integers (got [1.5])"),
    ([[0], ["0"]], [1.0, 1.0], [0, 0], [0, 0], "bucket 1: disk ids must be integers"),
    ([[0], 1], [1.0, 1.0], [0, 0], [0, 0], "bucket 1: expected a list of disk ids, got int"),
    ([[0], "01"], [1.0, 1.0], [0, 0], [0, 0], "bucket 1: expected a list of disk ids, got str"),
    ([[True]], [1.0, 1.0], [0, 0], [0, 0], "bucket 0: disk ids must be integers (got [True])"),
    ([[2 ** 40, True]], [1.0], [0], [0], "bucket 0: disk ids must be integers"),
    ([[0], [_FailingIndex(), True]], [1.0], [0], [0],
     "bucket 1: disk ids must be integers (got [_FailingIndex(), True])"),
    ([[0, 2 ** 31]], [1.0], [0], [0], "bucket 0: disk id out of range (got [0, 2147483648])"),
    ([[-2 ** 31 - 1]], [1.0], [0], [0], "bucket 0: disk id out of range"),
    ([[2 ** 40] * 100_000], [1.0], [0], [0], "bucket 0: disk id out of range (got "
     + "[" + ", ".join(["1099511627776"] * 4) + ",... (1500000 characters))"),
    ([[0]], [1.0, 1.0], [0.0], [0.0], "cost, delay and load must have one value per disk "
     "(got 2, 1, 1)"),
    ([[0]], [10 ** 400], [0], [0], "disk 0: cost 1000000000000000000000000000000000000000000000000000"
     "00000000... (401 characters) is too large (at most 1.79769e+308)"),
    ([[0]], [1], [10 ** 309], [0], "disk 0: delay 1000"),
    ([[0]], [1], [1e308], [1e308], "disk 0: delay + load (1e+308 + 1e+308) is too large to "
     "represent"),
    ([[0], [1], [1], [1]], [1.0, 1e308], [0, 0], [0, 0],
     "disk 1: delay + load + 3 bucket(s) x cost overflows a double: costs or times too large"),
    (5, [1.0], [0.0], [0.0], "buckets: expected a list of replica lists, got int"),
]


@pytest.mark.parametrize("buckets,cost,delay,load,message", _BAD_INPUTS)
def test_bad_input_errors_the_same_way_on_every_path(buckets, cost, delay, load, message):
    texts = []
    for path in (select_replicas, _prepared):
        with pytest.raises(SolverInputError) as caught:
            path(buckets, cost, delay, load)
        assert caught.value.exit_code == 2
        texts.append(str(caught.value))
    assert texts[0] == texts[1]
    assert texts[0].startswith(message) and "\n" not in texts[0] and len(texts[0]) < 200


@pytest.mark.parametrize("buckets,message", [
    (numpy.array([[0, 1], [1, 2]], dtype=numpy.int32), "bucket 1: disk id 2 out of range"),
    (numpy.array([[0, 1], [-3, 1]], dtype=numpy.int32), "bucket 1: disk id -3 out of range"),
    (numpy.zeros((2, 0), dtype=numpy.int32), "bucket 0: has no replica"),
    ([numpy.array([0], dtype=numpy.int32), numpy.array([], dtype=numpy.int32)],
     "bucket 1: has no replica"),
    ([numpy.array([0, 7], dtype=numpy.int32)], "bucket 0: disk id 7 out of range"),
    ([numpy.array([0.5])], "bucket 0: disk ids must be integers"),
    (numpy.array([0, 1], dtype=numpy.int32), "bucket 0: expected a list of disk ids, got int32"),
])
def test_bad_numpy_buckets_error_as_on_the_prepared_path(buckets, message):
    cost, delay, load = [1.0, 1.0], [0.0, 0.0], [0.0, 0.0]
    texts = []
    for path in (select_replicas, _prepared):
        with pytest.raises(SolverInputError) as caught:
            path(buckets, cost, delay, load)
        texts.append(str(caught.value))
    assert texts[0] == texts[1] and texts[0].startswith(message)


@pytest.mark.parametrize("column,message", [
    (numpy.array([1.0, numpy.nan]), "disk 1: cost must be finite, got nan"),
    (numpy.array([1.0, -1.0]), "disk 1: cost must be > 0, got -1.0"),
    (numpy.array([1.0]), "cost, delay and load must have one value per disk (got 1, 2, 2)"),
    (numpy.array([1, 0], dtype=numpy.int64), "disk 1: cost must be > 0, got 0.0"),
])
def test_bad_numpy_columns_error_as_on_the_prepared_path(column, message):
    texts = []
    for path in (select_replicas, _prepared):
        with pytest.raises(SolverInputError) as caught:
            path([[0], [1]], column, [0.0, 0.0], [0.0, 0.0])
        texts.append(str(caught.value))
    assert texts[0] == texts[1] == message


@pytest.mark.parametrize("algorithm,threads,message", [
    ("fastest", 1, "unknown algorithm 'fastest'"), (None, 1, "unknown algorithm None"),
    ("parallel", 0, "threads must be an integer in 1..1024, got 0"),
    ("auto", True, "threads must be an integer in 1..1024, got True"),
])
def test_bad_options_error_the_same_way_on_both_paths(algorithm, threads, message):
    for path in (select_replicas, _prepared):
        with pytest.raises(SolverInputError, match=f"^{message}"):
            path([[0]], [1.0], [0.0], [0.0], algorithm=algorithm, threads=threads)


def test_buffers_changed_by_another_thread_during_the_solve_are_never_read_out_of_bounds():
    # the GIL is released while the core reads a caller's int32 buffers in place: a thread
    # that flips ids between valid and out of range meanwhile gets some answer or a one-line
    # error, and the core never reads or writes past its arrays (the core checks every id
    # again as it copies them; run this under AddressSanitizer to see a stray access)
    import threading

    rng = numpy.random.default_rng(16)
    matrix = rng.integers(0, 100, size=(20_000, 3), dtype=numpy.int32)
    offsets = numpy.arange(0, 3 * 20_000 + 1, 3, dtype=numpy.int32)
    disks = matrix.reshape(-1).copy()
    csr = BucketsCSR.from_arrays(offsets, disks)
    cost, delay, load = [1.0 + d % 5 for d in range(100)], [0.0] * 100, [0.0] * 100
    table = DiskTable.from_lists(cost, delay, load)
    stop = threading.Event()

    def flip():
        # about half the time out of range, one past the last disk or negative: validation
        # may see the good value and the copy the bad one
        row, column = 15_000, 1
        while not stop.is_set():
            for bad in (100, -1, 100, 2 ** 31 - 1):
                matrix[row, column] = bad
                disks[3 * row + column] = bad
                matrix[row, column] = 5
                disks[3 * row + column] = 5
            offsets[7] = 2 ** 31 - 1
            offsets[7] = 21

    writer = threading.Thread(target=flip)
    writer.start()
    outcomes = set()
    try:
        for _ in range(150):
            for call in (lambda: select_replicas(matrix, cost, delay, load),
                         lambda: table.select(csr)):
                try:
                    call()
                    outcomes.add("answer")
                except SolverInputError as err:
                    assert "\n" not in str(err) and str(err).startswith("bucket ")
                    outcomes.add("error")
    finally:
        stop.set()
        writer.join()
    assert outcomes == {"answer", "error"}
