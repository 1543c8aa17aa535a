"""Replica selection: read every bucket of a request from the replica that makes it finish soonest.

The replica-selection paper (Altiparmak and Tosun, 2016), §2.3, the generalized retrieval
problem: bucket b has replicas on some disks; disk d serves its k-th bucket at
``delay[d] + load[d] + k * cost[d]``; choose one disk per bucket minimising the largest such
time over the used disks, the *response time*.  The work is done in C (``native/``): the core
(``replica_select.h``) solves, the binding (``_native.c``, ``py_input.c``) checks and converts
lists or int32/float64 buffers, words the one-line errors and scales decimal times to whole
units so that ties compare exactly.  This module is the API.

Algorithms (all exact, same optimum): ``blackbox`` (binary capacity scaling + capacity
incrementation, fresh max flow per probe), ``integrated`` (push-relabel conserving flow,
Algorithms 5 and 7), ``parallel`` (Algorithm 10, ``threads`` pthreads), ``slotsearch``
(candidate-time search with saturated-set jumps, the fastest); ``auto`` picks ``slotsearch``.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import SolverError, SolverInputError
from . import _native

__all__ = ["ALGORITHMS", "BucketsCSR", "DiskTable", "Selection", "select_replicas"]

ALGORITHMS = ("blackbox", "integrated", "parallel", "slotsearch")
_ALGORITHM_CODES = {"blackbox": _native.BLACKBOX, "integrated": _native.INTEGRATED,
                    "parallel": _native.PARALLEL, "slotsearch": _native.SLOTSEARCH}
_AUTO = "slotsearch"  # fastest on every workload of benchmarks/solver (docs/solver.rst)
_ALGORITHM_CODES["auto"] = _ALGORITHM_CODES[_AUTO]

# whole time units are exact below 2**53 (the binding checks the same bound for select)
_EXACT_INTEGER_LIMIT = 2.0 ** 53


@dataclass(frozen=True)
class BucketsCSR:
    """A request in flat form: bucket b's replicas are ``disks[offsets[b]:offsets[b+1]]``."""

    offsets: Sequence[int]  # int32 buffer (array('i') or a memoryview), bucket_count + 1 items
    disks: Sequence[int]    # int32 buffer of disk ids

    @property
    def bucket_count(self) -> int:
        return len(self.offsets) - 1

    @classmethod
    def from_lists(cls, buckets) -> BucketsCSR:
        """Flatten a list of replica lists (or an int32 matrix); a bad bucket is named."""
        return cls(*_call(_native.flatten, buckets))

    @classmethod
    def from_arrays(cls, offsets, disks) -> BucketsCSR:
        """Wrap offsets and disk ids given as int32 buffers (array('i'), numpy int32: no copy)
        or lists."""
        return cls(_int32_buffer(offsets, "offsets"), _int32_buffer(disks, "disk ids"))


@dataclass(frozen=True)
class Selection:
    """The chosen replica per bucket and the response time it achieves."""

    response_time: float
    assignment: Sequence[int]  # disk per bucket
    counts: Sequence[int]      # buckets read per disk
    algorithm: str
    probes: int                # max-flow runs, or threshold raises for slotsearch

    def as_dict(self) -> dict:
        return {"response_time": self.response_time, "assignment": list(self.assignment),
                "counts": list(self.counts), "algorithm": self.algorithm, "probes": self.probes}


@dataclass(frozen=True)
class DiskTable:
    """Validated per-disk cost, delay and initial load, prepared once for many requests."""

    cost: tuple[float, ...]
    delay: tuple[float, ...]
    load: tuple[float, ...]
    scale: int = 0             # 10**k used for whole time units, 0 if the inputs are not decimal
    _unit_cost: array = field(default=None, repr=False, compare=False)
    _unit_delay: array = field(default=None, repr=False, compare=False)
    _unit_load: array = field(default=None, repr=False, compare=False)
    _raw: tuple = field(default=None, repr=False, compare=False)
    _unit_bounds: tuple = field(default=(0.0, 0.0), repr=False, compare=False)

    @classmethod
    def from_lists(cls, cost: Sequence[float], delay: Sequence[float],
                   load: Sequence[float]) -> DiskTable:
        """Check the columns (lists of numbers or float64 buffers); errors name the disk."""
        (raw_cost, raw_delay, raw_load, unit_cost, unit_delay, unit_load, scale,
         largest_base, largest_cost) = _call(_native.disk_table, cost, delay, load)
        return cls(tuple(raw_cost), tuple(raw_delay), tuple(raw_load), scale,
                   unit_cost, unit_delay, unit_load, (raw_cost, raw_delay, raw_load),
                   (largest_base, largest_cost))

    @property
    def disk_count(self) -> int:
        return len(self.cost)

    def select(self, buckets, *, algorithm: str = "auto", threads: int = 1) -> Selection:
        """Solve one request against this table; buckets as lists or a BucketsCSR."""
        name, code = _algorithm(algorithm, threads)
        csr = buckets if isinstance(buckets, BucketsCSR) else BucketsCSR.from_lists(buckets)
        if self.scale and self._fits_in_units(csr.bucket_count):
            cost, delay, load, divisor = self._unit_cost, self._unit_delay, self._unit_load, self.scale
        else:
            (cost, delay, load), divisor = self._raw, 1
        response, assignment, counts, probes = _call(
            _native.solve, csr.offsets, csr.disks, cost, delay, load, code, threads, divisor)
        return Selection(response, assignment, counts, name, probes)

    def _fits_in_units(self, bucket_count: int) -> bool:
        # every time the core forms is at most the largest base plus S slots of the dearest disk
        largest_base, largest_cost = self._unit_bounds
        return largest_base + bucket_count * largest_cost < _EXACT_INTEGER_LIMIT


def select_replicas(buckets, cost: Sequence[float], delay: Sequence[float],
                    load: Sequence[float], *, algorithm: str = "auto",
                    threads: int = 1) -> Selection:
    """Choose one replica disk per bucket minimising the response time (exact).

    ``buckets`` is a list of replica lists (disk ids; duplicates allowed), an int32 buffer of
    shape (buckets, replicas) such as a numpy array (used without a copy) or a BucketsCSR;
    ``cost``/``delay``/``load`` hold C_d > 0, D_d >= 0 and X_d >= 0 per disk (lists or float64
    buffers).  Lists are checked and converted in C in one pass; for many requests against the
    same disks build a DiskTable once and call its ``select``.
    """
    if isinstance(buckets, BucketsCSR):
        return DiskTable.from_lists(cost, delay, load).select(buckets, algorithm=algorithm,
                                                              threads=threads)
    name, code = _algorithm(algorithm, threads)
    response, assignment, counts, probes = _call(_native.select, buckets, cost, delay, load,
                                                 code, threads)
    return Selection(response, assignment, counts, name, probes)


def _algorithm(algorithm: str, threads: int) -> tuple[str, int]:
    """The algorithm's name and core code; checked before any input is read."""
    code = _ALGORITHM_CODES.get(algorithm) if isinstance(algorithm, str) else None
    if code is None:
        raise SolverInputError(f"unknown algorithm {algorithm!r} "
                               f"(choose from auto, {', '.join(ALGORITHMS)})")
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 1024:
        raise SolverInputError(f"threads must be an integer in 1..1024, got {threads!r}")
    return (_AUTO if algorithm == "auto" else algorithm), code


def _call(function, *args):
    """Call the binding; its InputError (one line naming the bucket or disk) becomes
    SolverInputError, a failure of the core SolverError."""
    try:
        return function(*args)
    except _native.InputError as err:
        raise SolverInputError(str(err)) from err
    except _native.SolverFailure as err:
        raise SolverError(str(err)) from err


def _int32_buffer(values, what: str):
    """values itself when it is a contiguous int32 buffer (no copy), else an array('i')."""
    if isinstance(values, array) and values.typecode == "i" and values.itemsize == 4:
        return values
    try:
        view = memoryview(values)
    except TypeError:
        view = None
    if view is not None and view.format in ("i", "<i", "=i") and view.itemsize == 4 \
            and view.ndim == 1 and view.c_contiguous:
        return view
    try:
        return array("i", values)
    except (TypeError, OverflowError) as err:
        raise SolverInputError(f"{what} must be 32-bit integers") from err
