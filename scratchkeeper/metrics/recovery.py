"""recoveryd's metrics: OST health, recoveries by state, bytes patched, patch latency."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from ..storage.base import OST_ACTIVE, OST_FAILED, OST_INACTIVE, OST_UNREACHABLE, OstStatus
from .endpoint import counts_by_state, gauge

#: an OST's states (scratchkeeper.storage.base), each a series of scratchkeeper_ost_state
OST_STATES = (OST_ACTIVE, OST_FAILED, OST_UNREACHABLE, OST_INACTIVE)
#: recovery request states (scratchkeeper.recovery.records); all four always exported
REQUEST_STATES = ("queued", "running", "done", "failed")
#: upper bounds (seconds) of the patch latency histogram: a small file's patch from a
#: loopback source takes well under a second, a large one from a slow endpoint an hour
LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
                   1800.0, 3600.0)
#: outcomes of a recovery recoveryd ran
OUTCOMES = ("whole", "lost")


class PatchStats:
    """What this recoveryd patched since it started (a counter resets with the process, as
    Prometheus's ``rate`` and ``increase`` expect)."""

    def __init__(self, buckets: Sequence[float] = LATENCY_BUCKETS):
        self.buckets = tuple(buckets)
        self._lock = threading.Lock()
        self.counts = [0] * (len(self.buckets) + 1)  # the last one: above every bound
        self.seconds = 0.0
        self.patched_bytes = 0
        self.outcomes = dict.fromkeys(OUTCOMES, 0)

    def observe(self, result: dict[str, Any]) -> None:
        """One finished recovery, from its outcome (``Outcome.to_dict``): ``state`` lost or
        not, ``patched_bytes``, ``seconds`` from its start to the layout switch."""
        lost = result.get("state") == "lost"
        with self._lock:
            self.outcomes["lost" if lost else "whole"] += 1
            if lost:
                return
            seconds = float(result.get("seconds") or 0.0)
            self.counts[bisect.bisect_left(self.buckets, seconds)] += 1
            self.seconds += seconds
            self.patched_bytes += int(result.get("patched_bytes") or 0)

    def families(self) -> Iterable[Metric]:
        with self._lock:
            counts, total, patched = list(self.counts), self.seconds, self.patched_bytes
            outcomes = dict(self.outcomes)
        histogram = HistogramMetricFamily(
            "scratchkeeper_recovery_patch_seconds", "time from a recovery's start to its file "
            "whole again (probe, plan, fetch and verify, layout switch), per recovered file",
            labels=[])
        cumulative, buckets = 0, []
        for bound, count in zip((*self.buckets, float("inf")), counts):
            cumulative += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
        histogram.add_metric([], buckets, total)
        yield histogram
        yield CounterMetricFamily("scratchkeeper_recovery_patched_bytes", "bytes patched onto "
                                  "substitute OSTs by this recoveryd", value=patched)
        finished = CounterMetricFamily("scratchkeeper_recovery_finished", "recoveries this "
                                       "recoveryd ran to their end, by outcome (whole again, "
                                       "or lost)", labels=["outcome"])
        for outcome in OUTCOMES:
            finished.add_metric([outcome], outcomes[outcome])
        yield finished


class RecoveryCollector:
    """``request_counts()``: (state, requests) of the recovery requests, read from recovery's
    own records (``recovery/records.py``, given by recoveryd: this package imports no
    service); ``probes()``: the OST states of recoveryd's last probe of every OST and when it
    was made (Unix time), or None before the first one."""

    name = "recovery"

    def __init__(self, request_counts: Callable[[], Sequence[tuple[str, int]]],
                 stats: PatchStats,
                 probes: Callable[[], tuple[float, list[OstStatus]] | None]):
        self.request_counts = request_counts
        self.stats = stats
        self.probes = probes

    def collect(self) -> Iterable[Metric]:
        yield from self.stats.families()
        counts = counts_by_state(self.request_counts())
        states = list(REQUEST_STATES) + sorted(set(counts) - set(REQUEST_STATES))
        yield gauge("scratchkeeper_recovery_requests", "recovery requests in the state "
                    "database by state (queued and running: the backlog; done and failed: "
                    "the requests kept: recovery.request_retention, pruned after it)", ["state"],
                    [((s,), counts.get(s, [0.0])[0]) for s in states])
        last = self.probes()
        if last is None:
            return
        when, statuses = last
        yield gauge("scratchkeeper_ost_up", "1 when the OST answered recoveryd's last probe "
                    "(state active), else 0", ["ost"],
                    [((str(o.ost_index),), 1.0 if o.healthy else 0.0) for o in statuses])
        yield gauge("scratchkeeper_ost_state", "the OST's state in recoveryd's last probe: 1 "
                    "for the state it is in", ["ost", "state"],
                    [((str(o.ost_index), s), 1.0 if o.state == s else 0.0)
                     for o in statuses for s in OST_STATES])
        yield gauge("scratchkeeper_ost_probe_timestamp_seconds", "when recoveryd last probed "
                    "every OST (Unix time; every recovery.check_interval)", [], [((), when)])
