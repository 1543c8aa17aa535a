"""The chain service's metrics, from the planner's tables at scrape time: chains by state,
their jobs by role and state, the chaining delay, offloads at close by state.

The tables are the planner's: the collector is given the reading functions of
``planner/records.py`` it calls (this package imports no service or planner module)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence

from prometheus_client.core import Metric

from .endpoint import counts_by_state, gauge, state_label

#: chains whose delay is summarised: those recorded in the last hour
DELAY_WINDOW = 3600.0
#: the ranks exported, as label values (not ``quantile``: that label belongs to summaries, whose
#: _count and _sum only grow, which a window's cannot promise)
DELAY_RANKS = {"p50": 0.5, "p95": 0.95, "p99": 0.99, "max": 1.0}


def quantile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted values (nearest rank); NaN of none."""
    if not ordered:
        return math.nan
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


class ChainCollector:
    """Each reader answers None while its tables are not made (no chain recorded yet), and
    its families are then left out: ``chain_counts()`` (state, chains), ``job_counts()``
    (role, state, jobs), ``stage_in_delays(since)`` the chaining delays (seconds) of the
    chains recorded since then, ``offload_counts()`` (state, offloads, bytes)."""

    name = "chains"

    def __init__(self, *, chain_counts: Callable[[], Sequence[tuple[str, int]] | None],
                 job_counts: Callable[[], Sequence[tuple[str, str, int]]],
                 stage_in_delays: Callable[[float], Sequence[float] | None],
                 offload_counts: Callable[[], Sequence[tuple[str, int, float]] | None],
                 clock: Callable[[], float] = time.time):
        self.chain_counts = chain_counts
        self.job_counts = job_counts
        self.stage_in_delays = stage_in_delays
        self.offload_counts = offload_counts
        self.clock = clock

    def collect(self) -> Iterable[Metric]:
        chains = self.chain_counts()
        if chains is not None:
            yield from self._chains(chains)
        delays = self.stage_in_delays(self.clock() - DELAY_WINDOW)
        if delays is not None:
            yield from self._delays(delays)
        offloads = self.offload_counts()
        if offloads is not None:
            counts = counts_by_state(offloads, columns=2)
            yield gauge("scratchkeeper_offloads", "results offloaded at close (#STAGEOUT -when "
                        "close) by state", ["state"],
                        [((s,), v[0]) for s, v in sorted(counts.items())])
            yield gauge("scratchkeeper_offload_bytes", "bytes of the results offloaded at "
                        "close by state", ["state"],
                        [((s,), v[1]) for s, v in sorted(counts.items())])

    def _chains(self, rows: Sequence[tuple[str, int]]) -> Iterable[Metric]:
        counts = counts_by_state(rows)
        yield gauge("scratchkeeper_chains", "chains in the state database by state",
                    ["state"], [((s,), v[0]) for s, v in sorted(counts.items())])
        jobs = self.job_counts()
        roles: set[str] = set()
        states: set[str] = set()
        merged: dict[tuple[str, str], float] = {}
        for role, state, count in jobs:
            key = (state_label(role, roles), state_label(state, states))
            merged[key] = merged.get(key, 0.0) + float(count)
        yield gauge("scratchkeeper_chain_jobs", "the chains' jobs by role (stage-in, compute, "
                    "stage-out) and state", ["role", "state"], sorted(merged.items()))

    def _delays(self, recorded: Sequence[float]) -> Iterable[Metric]:
        delays = sorted(max(0.0, delay) for delay in recorded)
        yield gauge("scratchkeeper_chain_stage_in_delay_seconds", "chaining delay of the chains "
                    "recorded in the last hour: from the chain's record (its submission, or the "
                    "chain service chaining the held job) to its stage-in job's start, by rank "
                    "(p50, p95, p99, max; NaN while none started)", ["rank"],
                    [((rank,), quantile(delays, q)) for rank, q in DELAY_RANKS.items()])
        yield gauge("scratchkeeper_chain_stage_in_delay_chains", "chains of the last hour whose "
                    "stage-in started (the sample of the quantiles)", [], [((), len(delays))])
