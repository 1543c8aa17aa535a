"""Replica selection: read every bucket of a request from the replica that makes it finish soonest.

Seed 000 section 2.3 (the generalized retrieval problem): bucket b has replicas on some disks;
disk d serves its k-th bucket at ``delay[d] + load[d] + k * cost[d]``; choose one disk per
bucket minimising the largest such time over the used disks, the *response time*.  The work
is done by the C core in ``native/`` (``replica_select.h``); this module converts inputs,
words errors and scales decimal times to whole units so that ties compare exactly.

Algorithms (all exact, same optimum): ``blackbox`` (binary capacity scaling + capacity
incrementation, fresh max flow per probe), ``integrated`` (push-relabel conserving flow,
Algorithms 5 and 7), ``parallel`` (Algorithm 10, ``threads`` pthreads), ``slotsearch``
(candidate-time search with saturated-set jumps, the fastest); ``auto`` picks ``slotsearch``.
"""

from __future__ import annotations

import math
import numbers
import sys
from array import array
from dataclasses import dataclass, field
from typing import Sequence

from ..errors import SolverError, SolverInputError
from . import _native

__all__ = ["ALGORITHMS", "BucketsCSR", "DiskTable", "Selection", "select_replicas"]

ALGORITHMS = ("blackbox", "integrated", "parallel", "slotsearch")
_ALGORITHM_CODES = {"blackbox": _native.BLACKBOX, "integrated": _native.INTEGRATED,
                    "parallel": _native.PARALLEL, "slotsearch": _native.SLOTSEARCH}
_AUTO = "slotsearch"  # fastest on every workload of benchmarks/solver (docs/solver.rst)

# Decimal inputs (13.2 ms) are scaled by 10**k, k <= _MAX_DECIMALS, to whole time units; the
# doubles then hold integers below 2**53, so sums, products and ties are exact.
_MAX_DECIMALS = 6
_EXACT_INTEGER_LIMIT = 2.0 ** 53


@dataclass(frozen=True)
class BucketsCSR:
    """A request in flat form: bucket b's replicas are ``disks[offsets[b]:offsets[b+1]]``."""

    offsets: array  # 'i' (int32), bucket_count + 1 items, offsets[0] == 0
    disks: array    # 'i' (int32) disk ids

    @property
    def bucket_count(self) -> int:
        return len(self.offsets) - 1

    @classmethod
    def from_lists(cls, buckets: Sequence[Sequence[int]]) -> "BucketsCSR":
        """Flatten a list of replica lists; a bucket that is not a list of ints is named."""
        offsets = array("i", [0])
        disks = array("i")
        for index, replicas in enumerate(buckets):
            if isinstance(replicas, (str, bytes)) or not hasattr(replicas, "__len__"):
                raise SolverInputError(f"bucket {index}: expected a list of disk ids, "
                                       f"got {type(replicas).__name__}")
            try:
                if any(isinstance(disk, bool) for disk in replicas):
                    raise TypeError("bool")
                disks.extend(replicas)
            except TypeError as err:
                raise SolverInputError(f"bucket {index}: disk ids must be integers "
                                       f"(got {_short(list(replicas))})") from err
            except OverflowError as err:
                raise SolverInputError(f"bucket {index}: disk id out of range "
                                       f"(got {_short(list(replicas))})") from err
            offsets.append(len(disks))
        return cls(offsets, disks)

    @classmethod
    def from_arrays(cls, offsets, disks) -> "BucketsCSR":
        """Wrap offsets and disk ids given as int32 buffers (array('i'), numpy int32) or lists."""
        return cls(_int32_array(offsets, "offsets"), _int32_array(disks, "disk ids"))


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
                   load: Sequence[float]) -> "DiskTable":
        if not (len(cost) == len(delay) == len(load)):
            raise SolverInputError(f"cost, delay and load must have one value per disk "
                                   f"(got {len(cost)}, {len(delay)}, {len(load)})")
        values = {}
        for name, column, positive in (("cost", cost, True), ("delay", delay, False),
                                       ("load", load, False)):
            checked = []
            for disk, value in enumerate(column):
                if isinstance(value, bool) or not isinstance(value, numbers.Real):
                    raise SolverInputError(f"disk {disk}: {name} must be a number, "
                                           f"got {_short(value)}")
                try:
                    value = float(value)
                except OverflowError:  # an integer beyond every double
                    raise SolverInputError(f"disk {disk}: {name} {_short(value)} is too large "
                                           f"(at most {sys.float_info.max:.6g})") from None
                if not math.isfinite(value):
                    raise SolverInputError(f"disk {disk}: {name} must be finite, got {value!r}")
                if positive and value <= 0.0:
                    raise SolverInputError(f"disk {disk}: {name} must be > 0, got {value!r}")
                if not positive and value < 0.0:
                    raise SolverInputError(f"disk {disk}: {name} must be >= 0, got {value!r}")
                checked.append(value)
            values[name] = tuple(checked)
        for disk, (delay_value, load_value) in enumerate(zip(values["delay"], values["load"])):
            if not math.isfinite(delay_value + load_value):
                raise SolverInputError(f"disk {disk}: delay + load ({delay_value!r} + "
                                       f"{load_value!r}) is too large to represent")
        scale = _decimal_scale(values["cost"] + values["delay"] + values["load"])
        if scale:
            units = {name: array("d", (float(round(v * scale)) for v in column))
                     for name, column in values.items()}
        else:
            units = {name: array("d", column) for name, column in values.items()}
        raw = (array("d", values["cost"]), array("d", values["delay"]), array("d", values["load"]))
        bounds = (max((d + x for d, x in zip(units["delay"], units["load"])), default=0.0),
                  max(units["cost"], default=0.0))
        return cls(values["cost"], values["delay"], values["load"], scale,
                   units["cost"], units["delay"], units["load"], raw, bounds)

    @property
    def disk_count(self) -> int:
        return len(self.cost)

    def select(self, buckets, *, algorithm: str = "auto", threads: int = 1) -> Selection:
        """Solve one request against this table; buckets as lists or a BucketsCSR."""
        csr = buckets if isinstance(buckets, BucketsCSR) else BucketsCSR.from_lists(buckets)
        name = _algorithm_name(algorithm)
        if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 1024:
            raise SolverInputError(f"threads must be an integer in 1..1024, got {threads!r}")
        bucket_count = csr.bucket_count
        if self.scale and self._fits_in_units(bucket_count):
            cost, delay, load, divisor = self._unit_cost, self._unit_delay, self._unit_load, self.scale
        else:
            (cost, delay, load), divisor = self._raw, 1
        assignment = array("i", bytes(4 * bucket_count))
        counts = array("i", bytes(4 * self.disk_count))
        try:
            status, index, response, probes = _native.solve(
                csr.offsets, csr.disks, cost, delay, load, _ALGORITHM_CODES[name], threads,
                assignment, counts)
        except ValueError as err:
            raise SolverInputError(str(err)) from err
        if status != _native.OK:
            raise _status_error(status, index, csr, self.disk_count)
        return Selection(response / divisor if divisor != 1 else response, assignment, counts,
                         name, probes)

    def _fits_in_units(self, bucket_count: int) -> bool:
        # every time the core forms is at most the largest base plus S slots of the dearest disk
        largest_base, largest_cost = self._unit_bounds
        return largest_base + bucket_count * largest_cost < _EXACT_INTEGER_LIMIT


def select_replicas(buckets, cost: Sequence[float], delay: Sequence[float],
                    load: Sequence[float], *, algorithm: str = "auto",
                    threads: int = 1) -> Selection:
    """Choose one replica disk per bucket minimising the response time (exact).

    ``buckets`` is a list of replica lists (disk ids; duplicates allowed) or a BucketsCSR;
    ``cost``/``delay``/``load`` hold C_d > 0, D_d >= 0 and X_d >= 0 per disk.  For many
    requests against the same disks build a DiskTable once and call its ``select``.
    """
    return DiskTable.from_lists(cost, delay, load).select(buckets, algorithm=algorithm,
                                                          threads=threads)


def _algorithm_name(algorithm: str) -> str:
    if algorithm == "auto":
        return _AUTO
    if algorithm not in _ALGORITHM_CODES:
        raise SolverInputError(f"unknown algorithm {algorithm!r} "
                               f"(choose from auto, {', '.join(ALGORITHMS)})")
    return algorithm


def _decimal_scale(values: Sequence[float]) -> int:
    """Smallest 10**k (k <= 6) turning every value into a whole number, or 0 if none does."""
    for decimals in range(_MAX_DECIMALS + 1):
        scale = 10 ** decimals
        if all(_is_decimal_with(value, scale) for value in values):
            return scale
    return 0


def _is_decimal_with(value: float, scale: int) -> bool:
    scaled = value * scale
    if not scaled < _EXACT_INTEGER_LIMIT:  # too large to be whole units (or inf)
        return False
    whole = round(scaled)
    # the double nearest whole/scale is the value itself: it *is* that decimal
    return whole < _EXACT_INTEGER_LIMIT and whole / scale == value


def _short(value) -> str:
    """``repr(value)``, cut to one readable line (a 401-digit number, a bucket of 10**5 ids)."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


def _int32_array(values, what: str) -> array:
    if isinstance(values, array) and values.typecode == "i" and values.itemsize == 4:
        return values
    try:
        view = memoryview(values)
    except TypeError:
        view = None
    if view is not None and view.format in ("i", "<i", "=i") and view.itemsize == 4 \
            and view.c_contiguous:
        converted = array("i")
        converted.frombytes(view.cast("B"))
        return converted
    try:
        return array("i", values)
    except (TypeError, OverflowError) as err:
        raise SolverInputError(f"{what} must be 32-bit integers") from err


def _status_error(status: int, index: int, csr: BucketsCSR, disk_count: int) -> SolverError:
    if status == _native.E_EMPTY_BUCKET:
        return SolverInputError(f"bucket {index}: has no replica")
    if status == _native.E_DISK_RANGE:
        replicas = list(csr.disks[csr.offsets[index]:csr.offsets[index + 1]])
        bad = next((d for d in replicas if not 0 <= d < disk_count), None)
        return SolverInputError(f"bucket {index}: disk id {bad} out of range "
                                f"(there are {disk_count} disks, ids 0..{disk_count - 1})")
    if status == _native.E_OFFSETS:
        return SolverInputError(f"bucket {index}: offsets must start at 0 and never decrease")
    if status in (_native.E_COST, _native.E_DELAY, _native.E_LOAD):
        return SolverInputError(f"disk {index}: {_native.status_text(status)}")
    if status == _native.E_RANGE:
        requested = sum(1 for b in range(csr.bucket_count)
                        if index in csr.disks[csr.offsets[b]:csr.offsets[b + 1]])
        return SolverInputError(f"disk {index}: delay + load + {requested} bucket(s) x cost "
                                f"overflows a double: costs or times too large")
    if status == _native.E_SIZE:
        return SolverInputError(f"{_native.status_text(status)}: {csr.bucket_count} buckets, "
                                f"{len(csr.disks)} replicas, {disk_count} disks")
    return SolverError(f"replica selection failed: {_native.status_text(status)}")
