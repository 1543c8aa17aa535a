"""The running local cluster's services, scraped by a real Prometheus server: recoveryd (with
the counters of the cluster's scratch mount), replicad and the chain service serve the
endpoints of the [metrics] section of the cluster's site.toml (site-config/local-cluster/
site.toml.in), each exposition passes the strict OpenMetrics parser and promtool, and
Prometheus finds every target up and answers for each service's own metrics.

A cluster started from a site.toml.in without [metrics] (before this change) is skipped, and
fails under SCRATCHKEEPER_REQUIRE_CLUSTER=1: `scripts/local-cluster up` writes the new
site.toml and restarts the services whose configuration changed.
"""

from __future__ import annotations

import json
import os
import tomllib
import urllib.request

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from scratchkeeper.config import listen_address, load_config

from .prometheus import PrometheusServer, promtool_check

#: the cluster's services (cluster.json's names) and their [metrics] keys
SERVICES = {"recoveryd": "recoveryd", "replicad": "replicad", "spank-chain": "chain_service"}
#: the service label each one gives itself
SERVICE_LABEL = {"recoveryd": "recoveryd", "replicad": "replicad", "spank-chain": "chain-service"}


@pytest.fixture(scope="module")
def endpoints(local_cluster) -> dict[str, str]:
    """cluster.json's service -> "host:port" its endpoint is on, from the cluster's site.toml."""
    raw = tomllib.loads(local_cluster.site_config.read_text())
    problem = None
    if "metrics" not in raw:
        problem = (f"{local_cluster.site_config} has no [metrics] section: the cluster was set "
                   "up before metrics; run scripts/local-cluster up")
    else:
        missing = [s for s, key in SERVICES.items() if key not in raw["metrics"]]
        if missing:
            problem = (f"{local_cluster.site_config}: [metrics] sets no endpoint for "
                       f"{', '.join(missing)}")
    if problem is not None:
        if os.environ.get("SCRATCHKEEPER_REQUIRE_CLUSTER") == "1":
            pytest.fail(problem + " (SCRATCHKEEPER_REQUIRE_CLUSTER=1)", pytrace=False)
        pytest.skip(problem)
    config = load_config(local_cluster.site_config)
    running = json.loads(local_cluster.status_path.read_text()).get("pids", {})
    found = {}
    for service, key in SERVICES.items():
        address = listen_address(getattr(config.metrics, key))
        assert address is not None, f"metrics.{key} is off in {local_cluster.site_config}"
        assert service in running, f"cluster.json lists no running {service}"
        found[service] = f"{address[0]}:{address[1]}"
    return found


def _scrape(address: str) -> str:
    request = urllib.request.Request(f"http://{address}/metrics", headers={
        "Accept": "application/openmetrics-text;version=1.0.0"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.headers["Content-Type"].startswith("application/openmetrics-text")
            return answer.read().decode()
    except OSError as err:
        pytest.fail(f"http://{address}/metrics: {err} (do the cluster's services run with the "
                    "site.toml that has [metrics]? scripts/local-cluster up restarts them)",
                    pytrace=False)


def test_each_endpoint_parses_strictly(endpoints):
    for service, address in endpoints.items():
        text = _scrape(address)
        names = set()
        for family in text_string_to_metric_families(text):
            names.update(sample.name for sample in family.samples)
        assert "scratchkeeper_service_up" in names, service
        assert "scratchkeeper_collector_up" in names, service
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as answer:
            promtool_check(answer.read().decode())  # Prometheus's text format
        if service == "recoveryd":
            assert {"scratchkeeper_recovery_requests", "scratchkeeper_mount_up"} <= names
        if service == "replicad":
            assert "scratchkeeper_replicas" in names
        if service == "spank-chain":
            assert "scratchkeeper_chains" in names


def test_prometheus_scrapes_the_cluster(endpoints, local_cluster):
    server = PrometheusServer({service: [address] for service, address in endpoints.items()})
    try:
        targets = server.wait_up()
        assert {t["labels"]["job"] for t in targets} == set(endpoints)
        up = server.query("scratchkeeper_service_up", until=lambda r: len(r) == len(endpoints))
        assert {s["metric"]["service"] for s in up} == set(SERVICE_LABEL.values())
        assert all(s["value"][1] == "1" for s in up)
        # every collector answered (a table missing or the mount gone would say 0)
        failed = server.query("scratchkeeper_collector_up", until=lambda r: len(r) >= 4)
        assert all(s["value"][1] == "1" for s in failed), failed
        # the cluster's scratch mount runs beside recoveryd, and answers its counters
        mount = server.query("scratchkeeper_mount_up")
        assert mount[0]["value"][1] == "1"
        reads = server.query("scratchkeeper_mount_ost_reads_total")
        config = load_config(local_cluster.site_config)
        assert len(reads) == config.storage.ost_count
        # recoveryd's first check probes every OST at its start
        osts = server.query("scratchkeeper_ost_up", timeout=120)
        assert len(osts) == config.storage.ost_count
        server.query('scratchkeeper_chains or scratchkeeper_chain_jobs')
        server.query("scratchkeeper_replicas")
    finally:
        server.stop()
