"""Library max-flow peers used black-box (the replica-selection paper §2.3.2).

``ortools-bb``/``scipy-bb``: binary capacity scaling then capacity incrementation, a fresh max
flow per probe (the LEDA black-box of [33]); the max flow is OR-Tools SimpleMaxFlow or SciPy's
Dinic.  ``ortools-search``: what a user would write with OR-Tools, a binary search over the
sorted candidate times D_d + X_d + k C_d with a fresh SimpleMaxFlow per probe, given the same
Python lists as ``select_replicas``.  Times are the solver's whole units (DiskTable),
capacities use the same exact slot formula.
"""

from __future__ import annotations

import numpy as np

from scratchkeeper.solver import BucketsCSR, DiskTable


class _Request:
    """The flow network of one request: source 0, buckets 1..S, disks S+1..S+N, sink."""

    def __init__(self, table: DiskTable, csr: BucketsCSR):
        offsets = np.frombuffer(csr.offsets, dtype=np.int32)
        disks = np.frombuffer(csr.disks, dtype=np.int32)
        bucket_count = len(offsets) - 1
        bucket_of = np.repeat(np.arange(bucket_count, dtype=np.int64), np.diff(offsets))
        pairs = np.unique(bucket_of * table.disk_count + disks)  # drops duplicate replicas
        self.pair_bucket = pairs // table.disk_count
        pair_disk = pairs % table.disk_count
        used, self.pair_local = np.unique(pair_disk, return_inverse=True)
        self.used = used
        self.bucket_count = bucket_count
        self.disk_count = len(used)
        scale = table.scale if table.scale and table._fits_in_units(bucket_count) else 0
        source = table._unit_cost if scale else table._raw[0]
        self.cost = np.frombuffer(source, dtype=np.float64)[used]
        delay = np.frombuffer(table._unit_delay if scale else table._raw[1], dtype=np.float64)
        load = np.frombuffer(table._unit_load if scale else table._raw[2], dtype=np.float64)
        self.base = (delay + load)[used]
        self.divisor = scale or 1
        self.degree = np.bincount(self.pair_local, minlength=self.disk_count)
        self.source, self.sink = 0, bucket_count + self.disk_count + 1

    def slots_within(self, threshold: float) -> np.ndarray:
        """Exact disk capacities at a threshold, as the C core computes them."""
        k = np.floor((threshold - self.base) / self.cost)
        k = np.clip(np.nan_to_num(k, nan=0.0), 0, self.degree)
        k = np.where((k < self.degree) & (self.base + (k + 1) * self.cost <= threshold), k + 1, k)
        k = np.where((k > 0) & (self.base + k * self.cost > threshold), k - 1, k)
        return k.astype(np.int64)

    def slot_times(self) -> np.ndarray:
        """Every candidate time: base + k * cost for k = 1 .. degree of each used disk."""
        return np.concatenate([self.base[d] + np.arange(1, n + 1) * self.cost[d]
                               for d, n in enumerate(self.degree)])

    def proposition1_bound(self) -> float:
        """Smallest candidate time with enough slots for every bucket."""
        return float(np.partition(self.slot_times(), self.bucket_count - 1)[self.bucket_count - 1])


def _capacity_search(request: _Request, routed) -> tuple[float, np.ndarray]:
    """BCS + CI around a black-box feasibility test routed(capacities) -> bool."""
    min_cost = float(request.cost.min())
    t_min = request.proposition1_bound() - min_cost
    t_max = float((request.base + request.degree * request.cost).max())
    while t_max - t_min >= min_cost:
        t_mid = t_min + (t_max - t_min) * 0.5
        if routed(request.slots_within(t_mid)):
            t_max = t_mid
        else:
            t_min = t_mid
    capacity = request.slots_within(t_min)
    while not routed(capacity):
        growable = capacity < request.degree
        next_slot = np.where(growable, request.base + (capacity + 1) * request.cost, np.inf)
        capacity = capacity + (growable & (next_slot == next_slot.min()))
    used = capacity > 0
    response = float((request.base + capacity * request.cost)[used].max())
    return response / request.divisor, capacity


def _ortools_router(request: _Request):
    """routed(capacities) -> bool: a fresh OR-Tools SimpleMaxFlow on the request's network."""
    from ortools.graph.python import max_flow

    S, N = request.bucket_count, request.disk_count
    tails = np.concatenate([np.zeros(S, np.int32), 1 + request.pair_bucket.astype(np.int32),
                            S + 1 + np.arange(N, dtype=np.int32)])
    heads = np.concatenate([1 + np.arange(S, dtype=np.int32),
                            S + 1 + request.pair_local.astype(np.int32),
                            np.full(N, request.sink, np.int32)])
    fixed = np.ones(S + len(request.pair_bucket), np.int64)

    def routed(capacity):
        solver = max_flow.SimpleMaxFlow()
        solver.add_arcs_with_capacity(tails, heads, np.concatenate([fixed, capacity]))
        if solver.solve(request.source, request.sink) != solver.OPTIMAL:
            raise RuntimeError("OR-Tools max flow failed")
        return solver.optimal_flow() == S

    return routed


def ortools_blackbox(table: DiskTable, csr: BucketsCSR) -> float:
    """Response time via OR-Tools SimpleMaxFlow, a fresh solver per probe."""
    request = _Request(table, csr)
    return _capacity_search(request, _ortools_router(request))[0]


def ortools_candidate_search(buckets, cost, delay, load) -> float:
    """Response time from the list input: binary search over the sorted candidate times, a
    fresh OR-Tools SimpleMaxFlow per probe (the black-box way to use a max-flow library)."""
    table = DiskTable.from_lists(cost, delay, load)
    request = _Request(table, BucketsCSR.from_lists(buckets))
    if request.bucket_count == 0:
        return 0.0
    routed = _ortools_router(request)
    candidates = np.unique(request.slot_times())
    low, high = 0, len(candidates) - 1
    while low < high:
        middle = (low + high) // 2
        if routed(request.slots_within(float(candidates[middle]))):
            high = middle
        else:
            low = middle + 1
    return float(candidates[low]) / request.divisor


def scipy_blackbox(table: DiskTable, csr: BucketsCSR) -> float:
    """Response time via scipy.sparse.csgraph.maximum_flow (Dinic), fresh per probe."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_flow

    request = _Request(table, csr)
    S, N = request.bucket_count, request.disk_count
    rows = np.concatenate([np.zeros(S, np.int32), 1 + request.pair_bucket.astype(np.int32),
                           S + 1 + np.arange(N, dtype=np.int32)])
    cols = np.concatenate([1 + np.arange(S, dtype=np.int32),
                           S + 1 + request.pair_local.astype(np.int32),
                           np.full(N, request.sink, np.int32)])
    data = np.ones(len(rows), np.int32)
    graph = csr_matrix((data, (rows, cols)), shape=(request.sink + 1, request.sink + 1))
    graph.sort_indices()
    # each disk row holds exactly its arc to the sink
    sink_entries = graph.indptr[S + 1:S + 1 + N]

    def routed(capacity):
        graph.data[sink_entries] = capacity.astype(np.int32)
        return maximum_flow(graph, request.source, request.sink,
                            method="dinic").flow_value == S

    return _capacity_search(request, routed)[0]


# peers of the prepared (CSR) path: (table, csr) -> response time
PEERS = {"ortools-bb": ortools_blackbox, "scipy-bb": scipy_blackbox}
# peers of the list path: (buckets, cost, delay, load) as Python lists -> response time
LIST_PEERS = {"ortools-search": ortools_candidate_search}
