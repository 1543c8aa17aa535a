"""The HTTP endpoint a daemon serves its metrics on, and what every daemon exports.

One thread answers one scraper at a time (a second connection waits in the listen backlog),
each connection bounded by ``metrics.scrape_timeout``: the endpoint costs a daemon one thread
and one socket whatever connects to it. It answers ``GET /metrics`` (``/`` too, as a
scraper's default) in OpenMetrics when the scraper asks for it (Prometheus does), else in
Prometheus's text format; anything else is 404 or 405, with no other page or form to reach.
"""

from __future__ import annotations

import http.server
import logging
import re
import socket
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from .. import __version__
from ..config import SiteConfig, listen_address
from ..errors import ScratchkeeperError

log = logging.getLogger(__name__)

#: the services and their ``[metrics]`` keys
SERVICES = {"recoveryd": "recoveryd", "replicad": "replicad", "chain-service": "chain_service",
            "tierd": "tierd", "metrics": "mount"}
#: a label value taken from a table's state column: the code's own names look like this
_STATE_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
#: distinct values of one state label at most; more (a column gone wrong) are summed as "other"
MAX_STATES = 32


class Collector(Protocol):
    """What a daemon registers: a name (the ``collector`` label of
    ``scratchkeeper_collector_up``) and the families computed at scrape time."""

    name: str

    def collect(self) -> Iterable[Metric]: ...


def state_label(value: object, seen: set[str]) -> str:
    """A table's state as a label value: the code's names pass, anything else (or a name past
    :data:`MAX_STATES` distinct ones) is ``other``, so no row can grow the series set."""
    text = str(value)
    if _STATE_NAME.fullmatch(text) and (text in seen or len(seen) < MAX_STATES):
        seen.add(text)
        return text
    return "other"


def counts_by_state(rows: Iterable[Sequence[Any]], *, columns: int = 1) -> dict[str, list[float]]:
    """Rows ``(state, value...)`` summed per :func:`state_label` (``columns`` values each)."""
    seen: set[str] = set()
    totals: dict[str, list[float]] = {}
    for row in rows:
        label = state_label(row[0], seen)
        sums = totals.setdefault(label, [0.0] * columns)
        for i in range(columns):
            sums[i] += float(row[1 + i] or 0)
    return totals


def gauge(name: str, doc: str, labels: Sequence[str] = (),
          samples: Iterable[tuple[Sequence[str], float]] = ()) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=list(labels))
    for values, value in samples:
        family.add_metric(list(values), value)
    return family


class _Guarded:
    """A collector whose failure (the state database locked, a table not made yet, the mount
    gone) drops its own families from that scrape and says so, instead of failing the scrape."""

    def __init__(self, inner: Collector, status: dict[str, float]):
        self.inner = inner
        self.status = status

    def collect(self) -> Iterable[Metric]:
        try:
            families = list(self.inner.collect())
        except (ScratchkeeperError, OSError, sqlite3.Error, ValueError, KeyError,
                TypeError) as err:
            log.warning("metrics: collector %s: %s", self.inner.name, err)
            self.status[self.inner.name] = 0.0
            return []
        self.status[self.inner.name] = 1.0
        return families


class _Service:
    """Every daemon's own metrics: that it is up, what it is, since when, and whether each of
    its collectors answered in this scrape (collected last, after the others ran)."""

    def __init__(self, service: str, status: dict[str, float]):
        self.service = service
        self.status = status
        self.started = time.time()

    def collect(self) -> Iterable[Metric]:
        yield gauge("scratchkeeper_service_up", "1 while the service answers (a scrape that "
                    "fails is Prometheus's up == 0)", ["service"], [((self.service,), 1.0)])
        info = InfoMetricFamily("scratchkeeper_service", "the service and its version",
                                labels=["service"])
        info.add_metric([self.service], {"version": __version__})
        yield info
        yield gauge("scratchkeeper_service_start_time_seconds", "when the service started "
                    "(Unix time)", ["service"], [((self.service,), self.started)])
        yield gauge("scratchkeeper_collector_up", "1 when the collector answered in this "
                    "scrape, 0 when it failed (the service's log says why)",
                    ["service", "collector"],
                    [((self.service, name), value) for name, value in sorted(self.status.items())])


def registry_of(service: str, collectors: Iterable[Collector]) -> CollectorRegistry:
    """A private registry (not the library's global one, with its process collectors) of the
    service's collectors, each guarded, and the service's own metrics."""
    registry = CollectorRegistry(auto_describe=False)
    status: dict[str, float] = {}
    for collector in collectors:
        registry.register(_Guarded(collector, status))
    registry.register(_Service(service, status))
    return registry


def render(registry: CollectorRegistry, accept: str = "application/openmetrics-text") -> tuple[bytes, str]:
    """The exposition of ``registry`` in the format ``accept`` asks for, and its content type."""
    encoder, content_type = choose_encoder(accept)
    return encoder(registry), content_type


class _Handler(http.server.BaseHTTPRequestHandler):
    server_version = "scratchkeeper-metrics"
    registry: CollectorRegistry  # set on the subclass each endpoint makes

    def do_GET(self) -> None:  # the name http.server calls
        if self.path.split("?", 1)[0] not in ("/metrics", "/"):
            self.send_error(404, "only /metrics is served here")
            return
        body, content_type = render(self.registry, self.headers.get("Accept", ""))
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self) -> None:
        self.send_error(405)

    do_POST = do_PUT = do_DELETE = do_HEAD

    def log_message(self, format: str, *args: object) -> None:
        """Scrapes every 15 s are not worth a log line each; errors are logged by do_GET's
        callers (http.server reports a broken connection through here too: kept at debug)."""
        log.debug("metrics: %s: " + format, self.address_string(), *args)


class _Server(http.server.HTTPServer):
    """One thread, one connection at a time, each with a deadline."""

    allow_reuse_address = True
    request_queue_size = 8

    def __init__(self, address: tuple[str, int], handler: type[_Handler], timeout: float):
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.connection_timeout = timeout
        super().__init__(address, handler)

    def get_request(self):  # type: ignore[no-untyped-def]
        conn, peer = super().get_request()
        conn.settimeout(self.connection_timeout)
        return conn, peer

    def handle_error(self, request, client_address) -> None:  # type: ignore[no-untyped-def]
        log.debug("metrics: a scrape from %s ended early", client_address, exc_info=True)


class MetricsEndpoint:
    """A running endpoint: its address, and :meth:`close`."""

    def __init__(self, server: _Server, registry: CollectorRegistry, service: str):
        self._server = server
        self.registry = registry
        self.service = service
        self.host, self.port = server.server_address[:2]
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5},
                                        name=f"metrics-{service}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


def serve(config: SiteConfig, service: str,
          collectors: Iterable[Collector]) -> MetricsEndpoint | None:
    """Start ``service``'s endpoint at its ``[metrics]`` address; None when the key turns it
    off, or when the address cannot be bound (logged as an error: the daemon's own work goes
    on, and the scraper shows the target down)."""
    address = listen_address(getattr(config.metrics, SERVICES[service]))
    if address is None:
        log.info("metrics: %s serves no metrics (metrics.%s is off)", service,
                 SERVICES[service])
        return None
    registry = registry_of(service, collectors)
    handler = type("Handler", (_Handler,), {"registry": registry})
    try:
        server = _Server(address, handler, config.metrics.scrape_timeout)
    except OSError as err:
        log.error("metrics: %s cannot serve metrics on %s:%d: %s (metrics.%s)", service,
                  address[0], address[1], err.strerror or err, SERVICES[service])
        return None
    endpoint = MetricsEndpoint(server, registry, service)
    log.info("metrics: %s serves metrics on http://%s:%d/metrics", service, address[0],
             endpoint.port)
    return endpoint
