"""replicad's metrics: replicas by state, the space they take and may take, its cycles."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from prometheus_client.core import Metric

from .endpoint import counts_by_state, gauge

#: replica states (scratchkeeper.replication.decisions.ReplicaStatus); all always exported
REPLICA_STATES = ("creating", "ready", "removing", "failed")


class ReplicationCollector:
    """Reads replicad's tables (``replicas``, ``claims``, ``daemon_status``) at scrape time,
    through the functions of ``replication/state.py`` replicad gives it: ``replica_counts()``
    (state, replicas, bytes), ``active_claims()`` the claims holding a replica,
    ``daemon_status()`` what its last cycle wrote; ``max_space_fraction``:
    replication.max_space_fraction."""

    name = "replication"

    def __init__(self, *, replica_counts: Callable[[], Sequence[tuple[str, int, float]]],
                 active_claims: Callable[[], int],
                 daemon_status: Callable[[], dict[str, Any]], max_space_fraction: float):
        self.replica_counts = replica_counts
        self.active_claims = active_claims
        self.daemon_status = daemon_status
        self.max_space_fraction = max_space_fraction

    def collect(self) -> Iterable[Metric]:
        counts = counts_by_state(self.replica_counts(), columns=2)
        states = list(REPLICA_STATES) + sorted(set(counts) - set(REPLICA_STATES))
        yield gauge("scratchkeeper_replicas", "temporary replicas of job inputs by state",
                    ["state"], [((s,), counts.get(s, [0.0, 0.0])[0]) for s in states])
        yield gauge("scratchkeeper_replica_bytes", "bytes of the replicated files by replica "
                    "state (each replica takes as much again on its OSTs)", ["state"],
                    [((s,), counts.get(s, [0.0, 0.0])[1]) for s in states])
        yield gauge("scratchkeeper_replica_claims", "(job, input) pairs holding a replica now",
                    [], [((), float(self.active_claims()))])
        status = self.daemon_status()
        total = status.get("scratch_bytes")
        if isinstance(total, (int, float)) and total > 0:
            yield gauge("scratchkeeper_replica_space_limit_bytes", "what replicas may take: "
                        "replication.max_space_fraction of the scratch file system", [],
                        [((), float(total) * self.max_space_fraction)])
        for key, name, doc in (
                ("last_cycle", "scratchkeeper_replication_last_cycle_timestamp_seconds",
                 "when replicad's last decision cycle began (Unix time)"),
                ("last_cycle_seconds", "scratchkeeper_replication_last_cycle_duration_seconds",
                 "how long replicad's last decision cycle took"),
                ("consecutive_failures", "scratchkeeper_replication_consecutive_failures",
                 "decision cycles failed in a row (the scheduler did not answer)"),
                ("queued", "scratchkeeper_replication_queued_jobs",
                 "queued jobs the last cycle saw"),
                ("deferred_for_space", "scratchkeeper_replication_deferred_for_space",
                 "replicas the last cycle left for later: the space limit was reached")):
            value = status.get(key)
            if isinstance(value, list):
                value = len(value)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                yield gauge(name, doc, [], [((), float(value))])
