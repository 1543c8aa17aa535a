"""Prometheus/OpenMetrics export of the services (docs/operations.rst lists every metric).

Each daemon (recoveryd, replicad, the chain service, tierd) serves ``GET /metrics`` on the
address its ``[metrics]`` key names (loopback by default). What it exports is computed when
the scraper asks: counts read from the daemon's tables, the mount's counters read from the
virtual attributes of the scratch root, the OST states of recoveryd's last probe. Only the
in-process counters of work done (bytes patched, patch latency) are kept between scrapes.

Labels are bounded by the site, never by its users: an OST index, a state name of the code, a
log name, a direction, a performance class of the configuration; never a path, a user, a job.

The package is imported only by a daemon's start (``prometheus_client`` is not loaded by the
planner's commands). It runs no SQL and imports none of the services nor the planner: each
table is read by its owner's records module (docs/architecture.rst, "Who owns which table"),
whose reading functions the daemon hands to its collectors. The services call this package;
it does not call them.
"""

from __future__ import annotations

from .endpoint import Collector, MetricsEndpoint, serve

__all__ = ["Collector", "MetricsEndpoint", "serve"]
