"""OST outages for the replay, taken from a real node-failure trace in one of two ways.

``replayed``: each failure record hits OST ``node % ost_count`` at the same offset from the
start of the failure trace as from the start of the job trace (the failure trace repeats when
the job trace is longer). ``extrapolated`` (what the thesis's §4.7.2 did): the trace gives the
failure rate of one node and the repair times; each OST fails as a Poisson process with that
rate and is down for a repair time drawn from the trace's own repair times.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ..errors import InputError
from .traces import FailureRecord

DAY = 86400.0


@dataclass(frozen=True, slots=True)
class OstOutage:
    """OST ``ost_index`` is down from ``down`` to ``up`` (seconds of the replay clock)."""

    ost_index: int
    down: float
    up: float


@dataclass(frozen=True)
class FailureStats:
    """What the failure trace says about one node: failures per second and repair times."""

    node_failure_rate: float
    repair_seconds: tuple[float, ...]
    records: int
    period: float
    system_nodes: int
    nodes_with_records: int = 0     # distinct nodes named by the records

    @property
    def silent_nodes(self) -> int:
        """Nodes of the system without a single record (the rate still divides by them)."""
        return max(0, self.system_nodes - self.nodes_with_records)

    def warnings(self, source: str) -> list[str]:
        """What the user should know about the rate: nodes with no record at all (a trace that
        lost whole nodes' records gives a rate too low by their share), more node ids than
        nodes."""
        found = []
        if self.silent_nodes:
            share = 100.0 * self.silent_nodes / self.system_nodes
            found.append(
                f"{source}: warning: {self.silent_nodes:,} of the system's "
                f"{self.system_nodes:,} nodes ({share:.0f} %) have no failure record at all, "
                f"yet the node failure rate divides the {self.records:,} records by all "
                f"{self.system_nodes:,}; if the trace lost those nodes' records, the rate "
                f"(node MTBF {self.node_mtbf_days:,.0f} days) is {share:.0f} % too low")
        elif self.nodes_with_records > self.system_nodes:
            found.append(f"{source}: warning: the records name {self.nodes_with_records:,} "
                         f"distinct nodes, more than the system's {self.system_nodes:,}")
        return found

    @property
    def node_mtbf_days(self) -> float:
        return 1 / self.node_failure_rate / DAY if self.node_failure_rate > 0 else float("inf")

    @property
    def mean_repair_seconds(self) -> float:
        return sum(self.repair_seconds) / len(self.repair_seconds) if self.repair_seconds else 0.0


def failure_stats(records: list[FailureRecord], system_nodes: int | None = None) -> FailureStats:
    """Per-node failure rate over the trace's period and its repair times."""
    if not records:
        raise InputError("the failure trace has no record for the chosen system")
    nodes = system_nodes or max(r.system_nodes for r in records)
    first = min(r.started for r in records)
    last = max(r.started + r.down_seconds for r in records)
    period = max(last - first, DAY)
    return FailureStats(len(records) / (nodes * period),
                        tuple(r.down_seconds for r in records), len(records), period, nodes,
                        len({r.node for r in records}))


def _merge(outages: list[OstOutage]) -> list[OstOutage]:
    """Overlapping outages of one OST become one (a target cannot fail while it is down)."""
    outages.sort(key=lambda o: (o.ost_index, o.down))
    merged: list[OstOutage] = []
    for o in outages:
        last = merged[-1] if merged else None
        if last is not None and last.ost_index == o.ost_index and o.down <= last.up:
            if o.up > last.up:
                merged[-1] = OstOutage(o.ost_index, last.down, o.up)
        else:
            merged.append(o)
    merged.sort(key=lambda o: (o.down, o.ost_index))
    return merged


def replayed_outages(records: list[FailureRecord], ost_count: int, horizon: float) -> list[OstOutage]:
    """Failures replayed on the targets: node ``n`` fails as OST ``n % ost_count``."""
    if not records:
        raise InputError("the failure trace has no record for the chosen system")
    first = min(r.started for r in records)
    stats = failure_stats(records)
    cycle = stats.period
    outages = []
    shift = 0.0
    while shift < horizon:
        for r in records:
            down = r.started - first + shift
            if down >= horizon:
                break
            if r.down_seconds > 0:
                outages.append(OstOutage(r.node % ost_count, down, down + r.down_seconds))
        shift += cycle
    return _merge(outages)


def extrapolated_outages(stats: FailureStats, ost_count: int, horizon: float,
                         seed: int = 1) -> list[OstOutage]:
    """Each OST fails as a Poisson process at the node failure rate (the thesis, §4.7.2)."""
    rng = random.Random(seed)
    repairs = [s for s in stats.repair_seconds if s > 0] or [0.0]
    outages = []
    if stats.node_failure_rate <= 0:
        return outages
    for ost in range(ost_count):
        t = rng.expovariate(stats.node_failure_rate)
        while t < horizon:
            repair = rng.choice(repairs)
            outages.append(OstOutage(ost, t, t + repair))
            t += repair + rng.expovariate(stats.node_failure_rate)
    return _merge(outages)
