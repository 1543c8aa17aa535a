"""Request generators of the replica-selection paper's §5: random duplicate allocation of an
N x N grid onto N disks (r = 3), the synthetic query shapes of §5.2.1 and the small real-trace
sizes."""

from __future__ import annotations

import random
from dataclasses import dataclass

from scratchkeeper.solver import BucketsCSR

REPLICAS = 3
DISK_CONF3_COSTS = (13.2, 8.3, 6.1, 0.5, 0.2)  # ms per bucket, equal probability


@dataclass(frozen=True)
class DiskSetup:
    """Per-disk retrieval cost, network delay and initial load (ms)."""

    name: str
    cost: list[float]
    delay: list[float]
    load: list[float]


def disk_conf1(disks: int) -> DiskSetup:
    """Homogeneous, idle, equidistant disks: the basic retrieval problem."""
    return DiskSetup("conf1", [13.2] * disks, [0.0] * disks, [0.0] * disks)


def disk_conf3(disks: int, rng: random.Random) -> DiskSetup:
    """Heterogeneous disks; delay and initial load uniform in 2..10 ms (to the microsecond)."""
    return DiskSetup("conf3", [rng.choice(DISK_CONF3_COSTS) for _ in range(disks)],
                     [round(rng.uniform(2, 10), 3) for _ in range(disks)],
                     [round(rng.uniform(2, 10), 3) for _ in range(disks)])


def random_duplicate_allocation(disks: int, rng: random.Random) -> list[list[int]]:
    """Grid cell (i, j) -> index i * N + j -> r distinct disks chosen at random."""
    return [rng.sample(range(disks), REPLICAS) for _ in range(disks * disks)]


def _size_in_band(k: int, disks: int, rng: random.Random) -> int:
    # a request answerable in k disk accesses optimally has (k-1)N+1 .. kN buckets
    return rng.randint((k - 1) * disks + 1, k * disks)


def arbitrary_load1(disks: int, rng: random.Random) -> list[int]:
    """Arbitrary query, size distributed as over all subsets of the grid: Binomial(N^2, 1/2)."""
    cells = disks * disks
    size = max(1, min(cells, round(rng.gauss(cells / 2, (cells ** 0.5) / 2))))
    return rng.sample(range(cells), size)


def connected_load2(disks: int, rng: random.Random) -> list[int]:
    """Connected query on the wrap-around grid, size uniform over 1..N^2 (p_k = 1/N)."""
    size = _size_in_band(rng.randint(1, disks), disks, rng)
    start = (rng.randrange(disks), rng.randrange(disks))
    chosen = {start}
    frontier = [start]
    while len(chosen) < size:
        i, j = frontier[rng.randrange(len(frontier))]
        di, dj = rng.choice(((1, 0), (-1, 0), (0, 1), (0, -1)))
        cell = ((i + di) % disks, (j + dj) % disks)
        if cell not in chosen:
            chosen.add(cell)
            frontier.append(cell)
    return [i * disks + j for i, j in chosen]


def range_load3(disks: int, rng: random.Random) -> list[int]:
    """Rectangular query on the wrap-around grid, p_k halving with k (mean size ~ 3N/2)."""
    k = 1
    while k < disks and rng.random() < 0.5:
        k += 1
    size = _size_in_band(k, disks, rng)
    rows = rng.randint(-(-size // disks), min(disks, size))
    cols = min(disks, -(-size // rows))
    top, left = rng.randrange(disks), rng.randrange(disks)
    return [((top + r) % disks) * disks + (left + c) % disks
            for r in range(rows) for c in range(cols)]


def trace_sizes(disks: int, rng: random.Random) -> list[int]:
    """Arbitrary buckets in the request sizes of the paper's real traces (16..150)."""
    return rng.sample(range(disks * disks), rng.randint(16, 150))


SHAPES = {"Arbitrary-Load1": arbitrary_load1, "Connected-Load2": connected_load2,
          "Range-Load3": range_load3, "Traces-16..150": trace_sizes}


@dataclass(frozen=True)
class Workload:
    """One benchmark cell: a disk setup and its requests, as Python lists (the documented
    select_replicas input) and already in CSR form (the prepared path)."""

    shape: str
    disks: int
    setup: DiskSetup
    requests: list[BucketsCSR]
    lists: list[list[list[int]]]

    @property
    def name(self) -> str:
        return f"{self.shape} N={self.disks} {self.setup.name}"

    @property
    def mean_size(self) -> float:
        return sum(r.bucket_count for r in self.requests) / len(self.requests)


def make_workload(shape: str, disks: int, conf: str, count: int, seed: int) -> Workload:
    rng = random.Random(f"{shape}/{disks}/{conf}/{seed}")
    setup = disk_conf1(disks) if conf == "conf1" else disk_conf3(disks, rng)
    allocation = random_duplicate_allocation(disks, rng)
    lists = [[allocation[cell] for cell in SHAPES[shape](disks, rng)] for _ in range(count)]
    return Workload(shape, disks, setup, [BucketsCSR.from_lists(r) for r in lists], lists)
