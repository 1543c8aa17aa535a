"""Independent references for the solver tests: brute force and binary search + networkx max flow.

Times are exact: decimal inputs become Fractions (what the solver's whole time units mean);
other floats use the solver's documented formula (delay + load) + k * cost in doubles.
"""

from __future__ import annotations

import itertools
import random
from fractions import Fraction

import networkx as nx

from scratchkeeper.solver import DiskTable


def exact_times(cost, delay, load):
    """Per-disk (base, cost) in the arithmetic the solver promises for these inputs."""
    if DiskTable.from_lists(cost, delay, load).scale:
        return ([Fraction(repr(float(d))) + Fraction(repr(float(x))) for d, x in zip(delay, load)],
                [Fraction(repr(float(c))) for c in cost])
    return [float(d) + float(x) for d, x in zip(delay, load)], [float(c) for c in cost]


def response_time(assignment, cost, delay, load):
    """Response time of an assignment, exact (Fraction or the canonical double)."""
    base, unit = exact_times(cost, delay, load)
    counts = {}
    for disk in assignment:
        counts[disk] = counts.get(disk, 0) + 1
    return max((base[d] + k * unit[d] for d, k in counts.items()), default=0)


def brute_force(buckets, cost, delay, load):
    """Optimal response time by trying every choice (tiny instances only)."""
    best = None
    for choice in itertools.product(*[sorted(set(replicas)) for replicas in buckets]):
        t = response_time(choice, cost, delay, load)
        if best is None or t < best:
            best = t
    return best if best is not None else 0


def _feasible(buckets, base, unit, threshold):
    graph = nx.DiGraph()
    for b, replicas in enumerate(buckets):
        graph.add_edge("s", ("b", b), capacity=1)
        for d in set(replicas):
            graph.add_edge(("b", b), ("d", d), capacity=1)
    for d in {d for replicas in buckets for d in replicas}:
        slots = 0
        while slots < len(buckets) and base[d] + (slots + 1) * unit[d] <= threshold:
            slots += 1
        graph.add_edge(("d", d), "t", capacity=slots)
    return nx.maximum_flow_value(graph, "s", "t") == len(buckets)


def flow_reference(buckets, cost, delay, load):
    """Optimal response time: binary search over the sorted candidate times, networkx max flow."""
    if not buckets:
        return 0
    base, unit = exact_times(cost, delay, load)
    degree = {}
    for replicas in buckets:
        for d in set(replicas):
            degree[d] = degree.get(d, 0) + 1
    candidates = sorted({base[d] + k * unit[d] for d, n in degree.items() for k in range(1, n + 1)})
    low, high = 0, len(candidates) - 1
    while low < high:
        mid = (low + high) // 2
        if _feasible(buckets, base, unit, candidates[mid]):
            high = mid
        else:
            low = mid + 1
    return candidates[low]


def as_float(t) -> float:
    return float(t)


def random_instance(rng: random.Random, *, disks: int, buckets: int, kind: str,
                    max_replicas: int = 3):
    """A random request: 'homogeneous', 'heterogeneous' (decimal), 'floats' (arbitrary doubles);
    with duplicates, single-replica buckets and hot disks that force ties."""
    if kind == "homogeneous":
        cost = [13.2] * disks
        delay = [0.0] * disks
        load = [0.0] * disks
    elif kind == "heterogeneous":
        cost = [rng.choice([13.2, 8.3, 6.1, 0.5, 0.2, 1, 2]) for _ in range(disks)]
        delay = [rng.choice([0, 1, 2, 2.5, 10]) for _ in range(disks)]
        load = [rng.choice([0, 0, 1.5, 3, 7.25]) for _ in range(disks)]
    else:
        cost = [rng.uniform(0.1, 15) for _ in range(disks)]
        delay = [rng.uniform(0, 10) for _ in range(disks)]
        load = [rng.choice([0.0, rng.uniform(0, 10)]) for _ in range(disks)]
    hot = rng.randrange(disks)
    request = []
    for _ in range(buckets):
        count = rng.randint(1, max_replicas)
        replicas = [rng.randrange(disks) for _ in range(count)]
        if rng.random() < 0.2:
            replicas.append(replicas[0])  # duplicate id
        if rng.random() < 0.2:
            replicas[0] = hot
        request.append(replicas)
    return request, cost, delay, load
